"""What every verifier shares: sources, limits, the verdict, reading and judging evidence."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from runs.claims.bearing import cites_an_agent
from runs.claims.hashing import (
    EVIDENCE_KINDS,
    HUMAN_ANSWER,
    canonical_json,
    is_payload_hash,
    payload_hash,
)

Status = Literal["verified", "refuted", "unverified"]


@dataclass(frozen=True)
class Sources:
    """A fleet's registered verification sources, as plain values."""

    datasources: Mapping[str, str] = field(default_factory=dict)  # name -> DSN or SQLite path
    workspaces: Mapping[str, str] = field(default_factory=dict)  # name -> directory
    hosts: frozenset[str] = frozenset()  # "host" (default port) or "host:port"
    commands: frozenset[str] = frozenset()  # exact command lines


@dataclass(frozen=True)
class Limits:
    """What a check may cost: checks must stay cheap, or they become a second fleet."""

    query_timeout: float = 5.0  # seconds
    max_rows: int = 1000
    max_payload_bytes: int = 1024 * 1024  # canonical JSON of a query result; SQLite value size
    max_file_bytes: int = 1024 * 1024
    http_timeout: float = 10.0  # seconds, for the whole exchange
    max_body_bytes: int = 10 * 1024 * 1024
    max_redirects: int = 5  # same host only
    command_timeout: float = 300.0  # seconds
    max_output_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value <= 0:
                raise ValueError(f"Limits.{name} must be positive, not {value}")


DEFAULT_LIMITS: Final = Limits()


@dataclass(frozen=True)
class Verdict:
    """`payload` is what reality gave (the ground truth when refuted), None if nothing was read."""

    status: Status
    reason: str
    payload: dict[str, Any] | None = None


class _Unverifiable(Exception):
    """No verifier can reach the evidence; the message says why, for a reviewer."""


class _Refuted(Exception):
    """Reality contradicts the evidence but yields no payload (a failing query, a missing file)."""


@dataclass(frozen=True)
class _Evidence:
    kind: str
    source: str
    payload_hash: str
    payload: Mapping[str, Any] | None
    datasource: str | None
    workspace: str | None


def _read_evidence(evidence: Mapping[str, Any]) -> _Evidence:
    source = evidence.get("source")
    if not isinstance(source, str) or not source.strip():
        raise _Unverifiable("the evidence has no source to check")
    if cites_an_agent(source):
        raise _Unverifiable("another agent's text is not evidence")
    kind = evidence.get("kind")
    if kind == HUMAN_ANSWER:
        raise _Unverifiable("only a reviewer can record a human answer")
    if kind not in EVIDENCE_KINDS:
        raise _Unverifiable(
            f"unknown evidence kind {kind!r}: a verifier checks {', '.join(EVIDENCE_KINDS)}"
        )
    claimed_hash = evidence.get("payload_hash")
    if not is_payload_hash(claimed_hash):
        raise _Unverifiable("payload_hash must be 'sha256:' followed by 64 lowercase hex digits")
    payload = evidence.get("payload")
    names = {key: evidence.get(key) for key in ("datasource", "workspace")}
    for key, name in names.items():
        if name is not None and not isinstance(name, str):
            raise _Unverifiable(f"{key} must be the name of a registered {key}")
    return _Evidence(
        kind=kind,
        source=source,
        payload_hash=claimed_hash,
        payload=payload if isinstance(payload, Mapping) else None,
        datasource=names["datasource"],
        workspace=names["workspace"],
    )


def _registered(kind: str, registry: Mapping[str, str], name: str | None) -> tuple[str, str]:
    if name is None:
        if len(registry) == 1:
            return next(iter(registry.items()))
        count = f"{len(registry)} are" if registry else "none is"
        raise _Unverifiable(f"the evidence names no {kind}, and {count} registered for this fleet")
    if name not in registry:
        raise _Unverifiable(f"no {kind} named {name!r} is registered for this fleet")
    return name, registry[name]


def _judge(claimed: _Evidence, observed: dict[str, Any], checked: str, summary: str) -> Verdict:
    if payload_hash(observed) == claimed.payload_hash:
        return Verdict("verified", f"{checked}: reality matches the payload hash", observed)
    reason = f"{checked}: reality differs from the payload hash; {summary}"
    return Verdict("refuted", reason, observed)


def _preview(value: object, limit: int = 200) -> str:
    text = canonical_json(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _seconds(value: float) -> str:
    return f"{value:g} s"
