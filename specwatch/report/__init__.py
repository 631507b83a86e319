"""Report: the verdict table, the markdown report and its plots."""
