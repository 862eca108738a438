"""The job's files: every access through Beam's FileSystems, writes confined to the output
directory, the claim on it, and the staged swap that replaces a dataset (docs/integrity.md).
"""
