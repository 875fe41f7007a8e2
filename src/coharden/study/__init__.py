"""Studies on real data (SWE-bench / SWT-bench records and other systems' predictions): each reproduces a
report from a data directory and a repository directory, resumably through coharden's result store."""
