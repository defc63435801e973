"""Re-checking evidence that no claim holds (a failure packet's) with the claims' verifiers.

The same verifiers, sources and limits as a claim's evidence: reality matches the hash,
`verified`; it differs, `refuted`; nothing can reach it, `unverified` with why. Runs outside any
transaction (the verifiers touch databases, files, hosts and commands, and may take seconds);
the caller records the verdicts.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from runs.claims.verification import limits, sources_for, verify_in_time
from runs.claims.verifiers import Limits, Verdict


def check_evidence(
    *, fleet_id: int, evidence: Sequence[Mapping[str, Any]], with_limits: Limits | None = None
) -> list[Verdict]:
    """One verdict per piece of evidence, in order, from the fleet's registered sources."""
    if not evidence:
        return []
    sources = sources_for(fleet_id)
    return [verify_in_time(dict(item), sources, with_limits or limits()) for item in evidence]
