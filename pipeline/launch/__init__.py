"""Everything before the graph runs: the flags and their validated specs, the runner and its
quirks, the checks before any work, the job's context, the chunk plan, the last lines.
"""
