"""The pure logic of token windows: no Beam, no torch.

Modules: `params` (validated specs), `documents` (records → documents and rejects), `tokenizers`,
`windows` (the planner of docs/format.md#the-planner), `keys` (seeded doc keys and shards), `schema`
(the shard format and manifest, shared with the reader), `shards` (rows and counts).
"""
