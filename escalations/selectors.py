"""Reads of the human desk: blast radius of a run's claims, escalations by fleet."""

from typing import Any

from runs.models import Run


def radii_for(run: Run) -> dict[str, dict[str, Any]]:
    """Each claim's blast radius (filled in by the claims issue)."""
    return {}
