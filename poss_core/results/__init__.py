"""What a benchmark run leaves and every view reads: the records of each answer (records.py), their tables and
checks (analysis.py), and the compact, versioned evidence summary with its checked loader (evidence.py)."""
