"""What an agent declares or reports, as plain data: the services' inputs, whoever calls them."""

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TaskSpec:
    key: str
    agent: str
    title: str = ""
    prerequisites: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()
    reads_state_of: tuple[str, ...] = ()
    effect: str = "none"  # none | reversible | external
    dependency_confidence: str = "declared"  # declared | uncertain
    transaction: str | None = None
    weight: int = 1
    # None: not declared, so it consumes the claims of every task it depends on (fail closed);
    # a tuple, even (), replaces that set.
    consumes: tuple[str, ...] | None = None
    checks: tuple[str, ...] = ()  # claims it exists to check: it may start on them unverified


@dataclass(frozen=True)
class EvidenceSpec:
    kind: str  # query_result | file_read | http_exchange | test_run
    source: str
    payload_hash: str
    payload: dict[str, Any] | None = None
    datasource: str | None = None
    workspace: str | None = None


@dataclass(frozen=True)
class ClaimSpec:
    key: str
    statement: str
    load_bearing: bool = True
    evidence: EvidenceSpec | None = None
    about: tuple[str, ...] = ()  # subjects beside the statement's code spans


@dataclass(frozen=True)
class FailureSpec:
    kind: str  # transient | reasoning | spec | environment | error
    signature: str
    message: str = ""
    capability: str | None = None


@dataclass(frozen=True)
class ArtifactSpec:
    kind: str
    ref: str
    url: str | None = None


@dataclass(frozen=True)
class Outcome:
    """How an attempt ended, as its agent reports it."""

    outcome: str  # succeeded | failed
    failure: FailureSpec | None = None
    background_killed: tuple[str, ...] = ()  # the tasks whose background work was killed
    resumable: bool = False
    artifacts: tuple[ArtifactSpec, ...] = field(default=())
