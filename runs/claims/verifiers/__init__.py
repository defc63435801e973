"""Verifiers: re-check a claim's evidence against the fleet's registered sources, read-only."""

from collections.abc import Callable, Mapping
from typing import Any, Final

from runs.claims.verifiers.base import (
    DEFAULT_LIMITS,
    Limits,
    Sources,
    Verdict,
    _Evidence,
    _read_evidence,
    _Refuted,
    _Unverifiable,
)
from runs.claims.verifiers.file_read import _reach_file_read, _verify_file_read
from runs.claims.verifiers.http_exchange import _reach_http, _verify_http
from runs.claims.verifiers.query import _reach_query, _verify_query, split_sql
from runs.claims.verifiers.test_run import _reach_test_run, _verify_test_run

__all__ = ["DEFAULT_LIMITS", "Limits", "Sources", "Verdict", "split_sql", "unreachable", "verify"]


_VERIFIERS: Final[Mapping[str, Callable[[_Evidence, Sources, Limits], Verdict]]] = {
    "query_result": _verify_query,
    "file_read": _verify_file_read,
    "http_exchange": _verify_http,
    "test_run": _verify_test_run,
}

# Each verifier's first step, which reads nothing: what it would run, on which source.
_REACH: Final[Mapping[str, Callable[[_Evidence, Sources], object]]] = {
    "query_result": _reach_query,
    "file_read": _reach_file_read,
    "http_exchange": _reach_http,
    "test_run": _reach_test_run,
}


def verify(
    evidence: Mapping[str, Any], sources: Sources, *, limits: Limits = DEFAULT_LIMITS
) -> Verdict:
    """Re-check one piece of evidence against reality; never raises for bad evidence."""
    try:
        claimed = _read_evidence(evidence)
        return _VERIFIERS[claimed.kind](claimed, sources, limits)
    except _Unverifiable as unverifiable:
        return Verdict("unverified", str(unverifiable))
    except _Refuted as refuted:
        return Verdict("refuted", str(refuted))
    except OSError as error:  # the source is there but could not be read to the end
        return Verdict("unverified", f"the verifier could not reach the source: {error}")


def unreachable(evidence: Mapping[str, Any], sources: Sources) -> str | None:
    """Why no verifier could re-check the evidence against the fleet's sources (no such data
    source or workspace, a write, a second statement, a POST, a host or command not allowed,
    another agent's text), found by the verifiers' own first step without running anything;
    None when it could be re-checked."""
    try:
        claimed = _read_evidence(evidence)
        _REACH[claimed.kind](claimed, sources)
    except _Unverifiable as unverifiable:
        return str(unverifiable)
    return None
