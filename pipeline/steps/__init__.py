"""The job's steps as Beam transforms: read, dedup, encode, shuffle and write, finalize; the
tagged outputs they share and what a worker process tracks (progress, the collector).
"""
