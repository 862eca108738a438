"""Documents → parcels by shard → ordered rows → Parquet bytes, the file shuffle between
them, and the manifest built from the written shards.
"""
