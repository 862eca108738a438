"""Input files → chunks → records → documents: codecs, input Parquet, file names, receipts,
the launcher's chunk plan, records read back by their source, and the skipped-records policy.
"""
