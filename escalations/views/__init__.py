"""Pages of the human desk, a module per feature: every HTML page of Bulkhead is here."""
