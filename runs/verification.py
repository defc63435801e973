"""Verifying a claim's evidence with the fleet's sources (the claims issue)."""


def verify_claim(claim_id: int) -> None:
    """Not built yet: the claims issue wires runs.verifiers here."""
