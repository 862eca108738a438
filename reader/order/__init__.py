"""The order windows are read in: seeded permutations, the epoch and packed samplers, their
shared contract and committed position, and global batches dealt to ranks.
"""
