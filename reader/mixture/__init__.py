"""Several finished datasets as one weighted, exact, resumable stream of named sources
(docs/mixtures.md): the index space, the rule, the ledger, the sampler, the report.
"""
