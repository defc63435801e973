"""Claims and their evidence: hashing it, re-checking it against reality, judging, by hand."""
