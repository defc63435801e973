"""Reads of the human desk, a module per feature: the queue, a packet, reports, run pages."""
