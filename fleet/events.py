"""The webhook's event envelope and the `data` of each event type (DESIGN section 3)."""

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

Name = Annotated[str, StringConstraints(min_length=1, max_length=200, strip_whitespace=False)]
Text = Annotated[str, StringConstraints(max_length=5000)]
Hash = Annotated[str, StringConstraints(min_length=1, max_length=200)]
PayloadHash = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class TaskIn(Strict):
    key: Name
    title: Text = ""
    agent: Name
    prerequisites: list[Name] = []
    capabilities: list[Name] = []
    reads_state_of: list[Name] = []
    effect: Literal["none", "reversible", "external"] = "none"
    dependency_confidence: Literal["declared", "uncertain"] = "declared"
    transaction: Name | None = None
    weight: Annotated[int, Field(ge=0, le=1_000_000)] = 1
    consumes: list[Name] = []


class EvidenceIn(Strict):
    kind: Literal["query_result", "file_read", "http_exchange", "test_run"]
    source: Annotated[str, StringConstraints(min_length=1, max_length=20_000)]
    payload_hash: PayloadHash
    payload: dict[str, Any] | None = None
    datasource: Name | None = None
    workspace: Name | None = None


class ActingAs(Strict):
    agent: Name | None = None  # an orchestrator may act for another agent of its fleet


class RunStarted(ActingAs):
    run: Name
    title: Text = ""
    policy: Literal["scoped", "global_halt"] = "scoped"
    tasks: list[TaskIn]


class TasksAdded(ActingAs):
    run: Name
    tasks: Annotated[list[TaskIn], Field(min_length=1)]


class AttemptIn(Strict):
    prompt_hash: Hash
    context_hash: Hash


class TaskStarted(ActingAs):
    run: Name
    task: Name
    attempt: AttemptIn
    consumes: list[Name] = []


class ClaimIn(Strict):
    key: Name
    statement: Annotated[str, StringConstraints(min_length=1, max_length=5000)]
    load_bearing: bool = True
    evidence: EvidenceIn | None = None


class ClaimPosted(ActingAs):
    run: Name
    task: Name
    claim: ClaimIn


class ClaimChecked(ActingAs):
    run: Name
    task: Name
    claim: Name
    verdict: Literal["verified", "refuted"]
    evidence: EvidenceIn


class FailureIn(Strict):
    kind: Literal["transient", "reasoning", "spec", "environment", "error"]
    signature: Annotated[str, StringConstraints(min_length=1, max_length=500)]
    message: Text = ""
    capability: Name | None = None


class KilledIn(Strict):
    task: Name


class ArtifactIn(Strict):
    kind: Name
    ref: Annotated[str, StringConstraints(min_length=1, max_length=500)]
    url: Annotated[str, StringConstraints(max_length=1000)] | None = None


class TaskFinished(ActingAs):
    run: Name
    task: Name
    outcome: Literal["succeeded", "failed"]
    failure: FailureIn | None = None
    background_killed: list[KilledIn] = []
    resumable: bool = False
    artifacts: list[ArtifactIn] = []


class CapabilityChanged(ActingAs):
    capability: Name
    status: Literal["up", "down"]
    reason: Annotated[str, StringConstraints(max_length=500)] = ""
    role: Literal["authority", "observability", "rollback"] | None = None


class PacketSubmitted(ActingAs):
    run: Name
    task: Name
    packet: dict[str, Any]  # validated by escalations.packets, which names each bad field


DATA_MODELS: dict[str, type[Strict]] = {
    "run.started": RunStarted,
    "tasks.added": TasksAdded,
    "task.started": TaskStarted,
    "claim.posted": ClaimPosted,
    "claim.checked": ClaimChecked,
    "task.finished": TaskFinished,
    "capability.changed": CapabilityChanged,
    "packet.submitted": PacketSubmitted,
}


class Envelope(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal[
        "run.started",
        "tasks.added",
        "task.started",
        "claim.posted",
        "claim.checked",
        "task.finished",
        "capability.changed",
        "packet.submitted",
    ]
    timestamp: datetime
    data: dict[str, Any]
    agent: Name | None = None  # only in import_events files


class Invalid(Exception):
    """A request the webhook refuses; carries the JSON error list and the status."""

    def __init__(self, errors: list[dict[str, str]], status: int = 422) -> None:
        super().__init__(errors)
        self.errors = errors
        self.status = status


def error(loc: str, msg: str) -> dict[str, str]:
    return {"loc": loc, "msg": msg}


def pydantic_errors(exc: ValidationError, prefix: str) -> list[dict[str, str]]:
    """The one place a validation error becomes the JSON error list."""
    errors = []
    for item in exc.errors(include_url=False):
        loc = (
            ".".join([prefix, *(str(part) for part in item["loc"])])
            if prefix
            else ".".join(str(part) for part in item["loc"])
        )
        msg = item["msg"]
        if item["type"] == "extra_forbidden":
            msg = "unknown field"
        errors.append(error(loc, msg))
    return errors


def nul_bytes(value: object, loc: str = "") -> list[dict[str, str]]:
    """Every string (key or value) carrying a NUL byte, by location."""
    found: list[dict[str, str]] = []
    stack: list[tuple[object, str]] = [(value, loc)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                found.append(error(where or "body", "contains a NUL byte"))
        elif isinstance(item, dict):
            for key, child in item.items():
                child_loc = f"{where}.{key}" if where else str(key)
                if "\x00" in key:
                    found.append(error(child_loc, "field name contains a NUL byte"))
                stack.append((child, child_loc))
        elif isinstance(item, list):
            stack.extend((child, f"{where}.{i}") for i, child in enumerate(item))
    return sorted(found, key=lambda e: e["loc"])


def parse(body: object) -> tuple[Envelope, Strict]:
    """Validate an envelope and its data; raise Invalid naming every bad field."""
    errors = nul_bytes(body)
    if errors:
        raise Invalid(errors)
    if not isinstance(body, dict):
        raise Invalid([error("body", "must be a JSON object with type, timestamp and data")])
    try:
        envelope = Envelope.model_validate(body)
    except ValidationError as exc:
        raise Invalid(pydantic_errors(exc, "")) from exc
    try:
        data = DATA_MODELS[envelope.type].model_validate(envelope.data)
    except ValidationError as exc:
        raise Invalid(pydantic_errors(exc, "data")) from exc
    if isinstance(data, TaskFinished) and data.outcome == "failed" and data.failure is None:
        raise Invalid([error("data.failure", "required when outcome is failed")])
    if isinstance(data, RunStarted) and not data.tasks:
        raise Invalid([error("data.tasks", "a run needs at least one task")])
    return envelope, data
