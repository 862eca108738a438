"""Which documents the job removes before tokenizing them: exact and near copies (MinHash
with LSH bands over word n-grams) and benchmark text (docs/dedup.md).
"""
