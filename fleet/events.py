"""The webhook's event envelope and the `data` of each event type.

`fleet.event_json` reads the body as strict JSON (`loads`); `parse` validates it here.
"""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from fleet.errors import Refusal, error
from fleet.event_json import MAX_DEPTH, JsonPath, loads, unstorable
from runs.claims.bearing import MAX_SUBJECT_LENGTH, MAX_SUBJECTS
from runs.claims.hashing import payload_hash

__all__ = [
    "DATA_MODELS",
    "MAX_DEPTH",
    "ActingAs",
    "ArtifactIn",
    "AttemptIn",
    "CapabilityChanged",
    "ClaimChecked",
    "ClaimIn",
    "ClaimPosted",
    "Envelope",
    "EvidenceIn",
    "FailureIn",
    "Hash",
    "JsonPath",
    "Key",
    "KilledIn",
    "Label",
    "Name",
    "PacketSubmitted",
    "Partial",
    "PayloadHash",
    "RunStarted",
    "Strict",
    "TaskEntry",
    "TaskFinished",
    "TaskIn",
    "TaskStarted",
    "TasksAdded",
    "Text",
    "Title",
    "loads",
    "parse",
    "partial_of",
    "pydantic_errors",
    "rule_errors",
    "task_entry",
    "unstorable",
]

# What a key or a name may not hold, since it is shown as it is on pages, in emails' subjects
# and in CSV files: C0, DEL and C1 controls, the Unicode line and paragraph separators (a break
# in an email header), the bidirectional controls that reorder the text after them on a page
# ("load-bearing" shown as "gnireab-daol"), and the characters that show nothing at all (a
# zero-width space, a soft hyphen, a word joiner, a byte order mark, the Hangul fillers): with
# them, "plan.tier" and "plan.tier" plus a zero-width space were two keys that look the same.
# The joiners that scripts and emoji need (U+200C, U+200D) and the variation selectors stay.
# So do the format controls of the tag block (U+E0000 to U+E007F), of shorthand (U+1BCA0 to
# U+1BCA3) and of Egyptian hieroglyphs (U+13430 to U+1345F): each shows nothing.
UNPRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b\u200e\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\u3164\ufeff\uffa0\ufff9-\ufffb"
    "\U00013430-\U0001345f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e007f]"
)
# A key or a name is one word to the eye: a space other than the plain one (a no-break space,
# the typographic spaces, the ideographic space, the blank braille pattern) looks like the plain
# one or like nothing, and a space at either end cannot be seen at all.
LOOKS_BLANK = re.compile("[\u00a0\u1680\u2000-\u200a\u202f\u205f\u2800\u3000]")


def _printable(value: str) -> str:
    found = UNPRINTABLE.search(value)
    if found is not None:
        raise ValueError(
            f"must not contain control or invisible characters (U+{ord(found.group()):04X} at position "
            f"{found.start()}): keys and names are shown as they are, on pages, in emails and "
            "in CSV files"
        )
    return value


def _one_word_to_the_eye(value: str) -> str:
    found = LOOKS_BLANK.search(value)
    if found is not None:
        raise ValueError(
            f"must not contain a space other than the plain one (U+{ord(found.group()):04X} at "
            f"position {found.start()}): it looks like another key"
        )
    if value != value.strip(" "):
        raise ValueError("must not start or end with a space: it looks like the key without it")
    return value


# The lengths are the columns' (runs/models.py, fleet/models.py): longer is a 422, not a 500.
Name = Annotated[
    str,
    StringConstraints(min_length=1, max_length=200, strip_whitespace=False),
    AfterValidator(_printable),
    AfterValidator(_one_word_to_the_eye),
]
Label = Annotated[  # capabilities, groups, data sources, workspaces
    str,
    StringConstraints(min_length=1, max_length=100),
    AfterValidator(_printable),
    AfterValidator(_one_word_to_the_eye),
]
Title = Annotated[str, StringConstraints(max_length=300)]
Text = Annotated[str, StringConstraints(max_length=5000)]


def _one_path_segment(key: str) -> str:
    if "/" in key or key in (".", ".."):
        raise ValueError(
            "must not contain '/' nor be '.' or '..': it is a segment of the API's URLs"
        )
    return key


Key = Annotated[Name, AfterValidator(_one_path_segment)]  # a run's or a task's key


def _iso_text(value: object) -> object:
    """An event's timestamp is ISO 8601 text: a number is not read as Unix seconds or ms."""
    if not isinstance(value, str):
        raise ValueError('must be an ISO 8601 string such as "2026-12-02T10:00:00Z"')
    return value


def _in_utc(value: datetime) -> datetime:
    """The instant in UTC (no offset: UTC): an offset of 16 hours or more is valid ISO 8601 but
    beyond what PostgreSQL stores, and the instant is what the event says."""
    try:
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    except OverflowError:
        raise ValueError("is outside the years 1 to 9999 once converted to UTC") from None


Timestamp = Annotated[datetime, BeforeValidator(_iso_text), AfterValidator(_in_utc)]
Hash = Annotated[str, StringConstraints(min_length=1, max_length=200)]
PayloadHash = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class TaskIn(Strict):
    key: Key
    title: Title = ""
    agent: Name
    prerequisites: list[Name] = []
    capabilities: list[Label] = []
    reads_state_of: list[Label] = []
    effect: Literal["none", "reversible", "external"] = "none"
    dependency_confidence: Literal["declared", "uncertain"] = "declared"
    transaction: Label | None = None
    weight: Annotated[int, Field(ge=0, le=1_000_000)] = 1
    # Absent: it consumes its prerequisites' claims; a list (even []) replaces them.
    consumes: list[Name] | None = None
    checks: list[Name] = []


class EvidenceIn(Strict):
    kind: Literal["query_result", "file_read", "http_exchange", "test_run"]
    source: Annotated[str, StringConstraints(min_length=1, max_length=20_000)]
    payload_hash: PayloadHash
    payload: dict[str, Any] | None = None
    datasource: Label | None = None
    workspace: Label | None = None

    @model_validator(mode="after")
    def payload_is_what_the_hash_says(self) -> "EvidenceIn":
        # The payload is shown as ground truth: it must be the one the hash (and reality) vouch for.
        if self.payload is None:
            return self
        try:
            actual = payload_hash(self.payload)
        except (TypeError, ValueError):
            return self  # a number out of range: `unstorable` names it where it is
        if actual != self.payload_hash:
            raise ValueError(
                f"payload_hash is not the hash of the payload, which is {actual} "
                "(sha256 of its canonical JSON: keys sorted, separators , and :, UTF-8)"
            )
        return self


class ActingAs(Strict):
    agent: Name | None = None  # an orchestrator may act for another agent of its fleet


class RunStarted(ActingAs):
    run: Key
    title: Title = ""
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
    refreshed: list[Label] = []  # capabilities whose state it re-read (the context's `refresh`)


def _a_subject(subject: str) -> str:
    if not subject.strip():
        raise ValueError("must name something: a table.column, a file path, a URL, a test id")
    if any(ord(c) < 32 or ord(c) == 127 for c in subject):
        raise ValueError("must not contain control characters")
    return subject


# What a claim is about: `customers.customer_tier`, `config/pricing.yaml`, a URL, a test id.
Subject = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_SUBJECT_LENGTH),
    AfterValidator(_a_subject),
]


class ClaimIn(Strict):
    key: Name
    statement: Annotated[str, StringConstraints(min_length=1, max_length=5000)]
    load_bearing: bool = True
    about: Annotated[list[Subject], Field(max_length=MAX_SUBJECTS)] = []
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
    capability: Label | None = None


class KilledIn(Strict):
    task: Name


class ArtifactIn(Strict):
    """Shown as it is on the run page and counted in the reports: printable, as a key is."""

    kind: Annotated[str, StringConstraints(min_length=1, max_length=50), AfterValidator(_printable)]
    ref: Annotated[str, StringConstraints(min_length=1, max_length=500), AfterValidator(_printable)]
    url: Annotated[str, StringConstraints(max_length=1000), AfterValidator(_printable)] | None = (
        None
    )


class TaskFinished(ActingAs):
    run: Name
    task: Name
    outcome: Literal["succeeded", "failed"]
    failure: FailureIn | None = None
    background_killed: list[KilledIn] = []
    resumable: bool = False
    artifacts: list[ArtifactIn] = []


class CapabilityChanged(ActingAs):
    capability: Label
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
    timestamp: Timestamp
    data: dict[str, Any]
    agent: Name | None = None  # only in import_events files


TaskEntry = tuple[int, TaskIn | None, str | None]  # (index, the task if it parsed, its key)


@dataclass(frozen=True)
class Partial:
    """What did parse of a refused event's data: its reference errors are named with the rest."""

    type: str
    fields: Mapping[str, Any]  # the top-level fields of `data` that are valid, as sent
    tasks: tuple[TaskEntry, ...] = ()  # run.started and tasks.added


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
        elif item["type"] == "value_error":
            msg = msg.removeprefix("Value error, ")
        errors.append(error(loc, msg))
    return errors


def parse(
    body: object, *, imported: bool = False, repeated: Sequence[dict[str, str]] = ()
) -> tuple[Envelope, Strict]:
    """Validate an envelope and its data; raise Refusal naming every bad field.

    Fields sent twice (`repeated`, from `loads`), NUL bytes, the schema and the rules across
    fields are checked together; when any fails, the Refusal carries what did parse (`partial`)
    so that the intake can name reference errors too.
    """
    errors = [*repeated, *unstorable(body)]
    bad = {e["loc"] for e in errors}  # pydantic would name the same strings again
    if not isinstance(body, dict):
        raise Refusal(
            [*errors, error("body", "must be a JSON object with type, timestamp and data")]
        )
    if not imported and "agent" in body:
        # The sender is the agent of the URL; only an import file names it beside the type.
        msg = "unknown field: an orchestrator acting for another agent names it in data.agent"
        errors.append(error("agent", msg))
    envelope: Envelope | None = None
    try:
        envelope = Envelope.model_validate(body)
    except ValidationError as exc:
        errors += [e for e in pydantic_errors(exc, "") if e["loc"] not in bad]
    kind, raw = body.get("type"), body.get("data")
    if not isinstance(kind, str) or kind not in DATA_MODELS or not isinstance(raw, dict):
        raise Refusal(errors)  # the envelope's errors name what is missing
    data: Strict | None = None
    try:
        data = DATA_MODELS[kind].model_validate(raw)
    except ValidationError as exc:
        errors += [e for e in pydantic_errors(exc, "data") if e["loc"] not in bad]
    errors += rule_errors(kind, raw)
    if errors or envelope is None or data is None:
        raise Refusal(errors, partial=partial_of(kind, raw, data, errors))
    return envelope, data


def rule_errors(kind: str, raw: Mapping[str, Any]) -> list[dict[str, str]]:
    """The rules that span fields, checked on the data as sent."""
    if kind == "task.finished" and raw.get("outcome") == "failed" and raw.get("failure") is None:
        return [error("data.failure", "required when outcome is failed")]
    if kind == "run.started" and raw.get("tasks") == []:
        return [error("data.tasks", "a run needs at least one task")]
    return []


def partial_of(
    kind: str, raw: Mapping[str, Any], data: Strict | None, errors: list[dict[str, str]]
) -> Partial:
    def valid(name: str) -> bool:
        loc = f"data.{name}"
        return not any(e["loc"] == loc or e["loc"].startswith(loc + ".") for e in errors)

    fields = {name: value for name, value in raw.items() if isinstance(name, str) and valid(name)}
    if kind == "packet.submitted" and isinstance(raw.get("packet"), dict):
        fields["packet"] = raw["packet"]  # its validator names every bad field of its own
    tasks: tuple[TaskEntry, ...] = ()
    if isinstance(data, RunStarted | TasksAdded):
        tasks = tuple((i, spec, spec.key) for i, spec in enumerate(data.tasks))
    elif kind in ("run.started", "tasks.added") and isinstance(raw.get("tasks"), list):
        tasks = tuple(task_entry(i, item) for i, item in enumerate(raw["tasks"]))
    return Partial(type=kind, fields=fields, tasks=tasks)


def task_entry(index: int, item: object) -> TaskEntry:
    """A task of a refused declaration: parsed if it can be, else at least its key."""
    try:
        spec = TaskIn.model_validate(item)
    except ValidationError:
        key = item.get("key") if isinstance(item, dict) else None
        readable = isinstance(key, str) and 0 < len(key) <= 200 and "\x00" not in key
        return index, None, key if readable else None
    return index, spec, spec.key
