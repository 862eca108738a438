"""A finished dataset opened and read: the one open path, its integrity checks, regular
files only, the memory-mapped layout cache, and `WindowDataset`.
"""
