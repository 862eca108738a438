"""What ``python -m reader.inspect`` runs: the summary, ``--check``, ``--plot`` and the report
of removed documents.
"""
