"""The dataset on disk, defined once for the writer and the reader: the shard schema, the
directory's names and the manifest's records (docs/format.md).
"""
