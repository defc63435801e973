"""The packet Bulkhead drafts when the retry policy escalates: `build_failure_packet(attempts)`.

Pure: the attempts as recorded (with each one's decision), the refuted claims and the checked
evidence come in as plain data; out comes the packet's content with every field Bulkhead can
fill from the record (tried, ruled out, evidence) and the one it cannot: the smallest unblocking
question, which is left to the agent. The draft always fits the packet rules (`validate_packet`
accepts it once a question is added), so the agent may answer with the question alone.
"""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from escalations.packet_evidence import EVIDENCE_FIELDS
from escalations.packet_fields import LIST_MAX_ITEMS
from escalations.packets import PACKET_MAX_BYTES, packet_size
from runs.claims.bearing import cites_an_agent
from runs.claims.hashing import EVIDENCE_KINDS, is_payload_hash, payload_hash

QUESTION: Final = "smallest_unblocking_question"
# The fields a draft fills; an agent's packet that leaves one out takes the draft's.
DRAFTED_FIELDS: Final = ("tried", "ruled_out", "evidence")
# What each entry is cut to: one line a reviewer reads at a glance, well inside the packet rules.
ENTRY_CHARS: Final = 900
REASON_CHARS: Final = 400
# Room left in the packet for the agent's question and options: payloads go first beyond it.
DRAFT_MAX_BYTES: Final = PACKET_MAX_BYTES - 16 * 1024
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class AttemptFacts:
    """An attempt as Bulkhead recorded it, with what the retry policy decided after it."""

    number: int
    agent: str
    prompt_hash: str
    context_hash: str
    outcome: str = ""  # "succeeded", "failed", or "" while it runs
    failure_kind: str = ""
    failure_signature: str = ""
    failure_message: str = ""
    decisions: tuple[tuple[str, str], ...] = ()  # (action, reason), oldest first


@dataclass(frozen=True)
class RefutedClaim:
    key: str
    statement: str
    how: str  # the claim's reason: who refuted it, with what


@dataclass(frozen=True)
class Draft:
    content: dict[str, Any]  # the packet, its question empty
    missing: tuple[str, ...]  # what the agent still has to send


def build_failure_packet(
    attempts: Sequence[AttemptFacts],
    *,
    task: str,
    refuted: Sequence[RefutedClaim] = (),
    evidence: Sequence[Mapping[str, Any]] = (),
) -> Draft:
    """The packet the record supports: tried, ruled out and evidence; the question is missing."""
    ordered = sorted(attempts, key=lambda a: a.number)
    tried = [tried_entry(a, ordered[i - 1] if i else None) for i, a in enumerate(ordered)]
    ruled_out = [
        {"hypothesis": clean(c.statement, ENTRY_CHARS), "how": clean(how_of(c), ENTRY_CHARS)}
        for c in refuted
        if clean(c.statement, ENTRY_CHARS)
    ]
    content: dict[str, Any] = {
        "task": clean(task, 200) or "the escalated task",
        "tried": tried[-LIST_MAX_ITEMS:],
        "ruled_out": ruled_out[:LIST_MAX_ITEMS],
        "evidence": packet_evidence(evidence),
        QUESTION: "",
    }
    fit(content)
    return Draft(content=content, missing=missing_fields(content))


def missing_fields(content: Mapping[str, Any]) -> tuple[str, ...]:
    """What a draft leaves to the agent: the question, and tried or evidence if the record had
    none (a packet needs at least one of each)."""
    missing = [QUESTION] if not content.get(QUESTION) else []
    missing += [name for name in ("tried", "evidence") if not content.get(name)]
    return tuple(missing)


def tried_entry(attempt: AttemptFacts, before: AttemptFacts | None) -> str:
    """One attempt in a line: who, on what prompt and context (and whether they changed), how
    it ended, and what Bulkhead decided after it."""
    said = (
        f"Attempt {attempt.number} by {attempt.agent} (prompt {attempt.prompt_hash}, context "
        f"{attempt.context_hash}{changes(attempt, before)})"
    )
    if attempt.outcome == "failed":
        failure = ", ".join(x for x in (attempt.failure_kind, attempt.failure_signature) if x)
        message = clean(attempt.failure_message, REASON_CHARS)
        said += f" failed ({failure})" + (f": {message}" if message else "")
    else:
        said += f" {attempt.outcome}" if attempt.outcome else " is still running"
    for action, reason in attempt.decisions:
        said += f". Decision: {action} — {clean(reason, REASON_CHARS)}"
    return clean(said, ENTRY_CHARS)


def changes(attempt: AttemptFacts, before: AttemptFacts | None) -> str:
    if before is None:
        return ""
    changed = [
        name
        for name, now, then in (
            ("prompt", attempt.prompt_hash, before.prompt_hash),
            ("context", attempt.context_hash, before.context_hash),
        )
        if now != then
    ]
    if not changed:
        return f"; the same as attempt {before.number}"
    return f"; {' and '.join(changed)} changed since attempt {before.number}"


def how_of(claim: RefutedClaim) -> str:
    return f"claim {claim.key}: " + (claim.how if claim.how.strip() else "refuted")


def packet_evidence(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The checked evidence as packet evidence objects: each once, only what a verifier can
    re-check (never another agent's text or a person's answer), a payload only with its hash."""
    found: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for item in items:
        entry = evidence_object(item)
        if entry is None:
            continue
        key = tuple(entry.get(name) for name in ("kind", "source", "payload_hash", "datasource"))
        if key in seen:
            continue
        seen.add(key)
        found.append(entry)
    return found[:LIST_MAX_ITEMS]


def evidence_object(item: Mapping[str, Any]) -> dict[str, Any] | None:
    kind, source, claimed = item.get("kind"), item.get("source"), item.get("payload_hash")
    if kind not in EVIDENCE_KINDS or not is_payload_hash(claimed):
        return None
    if not isinstance(source, str) or not clean(source, 20_000):
        return None
    if cites_an_agent(source) or source != without_bad(source):
        return None
    entry: dict[str, Any] = {"kind": kind, "source": source.strip(), "payload_hash": claimed}
    payload = item.get("payload")
    if isinstance(payload, Mapping) and hashes_to(payload, claimed):
        entry["payload"] = dict(payload)
    for name in ("datasource", "workspace"):
        value = item.get(name)
        if isinstance(value, str) and value.strip() and clean(value, 200) == value:
            entry[name] = value
    assert set(entry) <= set(EVIDENCE_FIELDS)
    return entry


def hashes_to(payload: Mapping[str, Any], claimed: str) -> bool:
    try:
        return payload_hash(dict(payload)) == claimed and without_bad_payload(payload)
    except (TypeError, ValueError):
        return False


def without_bad_payload(payload: object) -> bool:
    """No NUL or lone surrogate anywhere in the payload: the packet rules refuse them."""
    stack: list[object] = [payload]
    while stack:
        value = stack.pop()
        if isinstance(value, str) and value != without_bad(value):
            return False
        if isinstance(value, Mapping):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
    return True


def fit(content: dict[str, Any]) -> None:
    """Drop payloads, largest first, until the draft leaves room for the agent's question:
    the hash stays (the re-check reads reality again), only the copy goes."""
    while packet_size(content) > DRAFT_MAX_BYTES:
        carrying = [e for e in content["evidence"] if "payload" in e]
        if not carrying:
            # Nothing left to shed but entries: keep the newest attempts and evidence.
            for name in ("evidence", "tried", "ruled_out"):
                if len(content[name]) > 1:
                    del content[name][0]
                    break
            else:
                return
            continue
        largest = max(carrying, key=lambda e: packet_size(e["payload"]))
        del largest["payload"]


def clean(text: str, limit: int) -> str:
    """Text on one line, without what a packet cannot hold, cut to `limit` characters."""
    one_line = _SPACE.sub(" ", without_bad(text)).strip()
    return one_line if len(one_line) <= limit else one_line[: limit - 1].rstrip() + "…"


def without_bad(text: str) -> str:
    return "".join(ch for ch in text if ch != "\x00" and not "\ud800" <= ch <= "\udfff")
