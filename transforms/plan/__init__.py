"""What the job decides for each document from its id, its length and the seed: its split,
its seeded key and shard, and its windows (docs/format.md).
"""
