"""The packet's evidence: objects the reviewer can check, never sentences. Pure."""

import re
from collections.abc import Mapping
from typing import Any

from escalations.packet_fields import (
    PacketError,
    all_valid,
    bad_strings,
    bounded_list,
    field_loc,
    json_kind,
    plain_text,
    shown,
)
from runs.claims.bearing import cites_an_agent
from runs.claims.hashing import payload_hash

SOURCE_MAX_CHARS = 20_000  # the same bound as a claim's evidence source
NAME_MAX_CHARS = 200

# What a verifier can re-check; a person's answer (`human_answer`) is recorded by Bulkhead when a
# reviewer gives it, never handed over by an agent.
EVIDENCE_KINDS = ("query_result", "file_read", "http_exchange", "test_run")
HUMAN_ANSWER = "human_answer"
EVIDENCE_FIELDS = ("kind", "source", "payload_hash", "payload", "datasource", "workspace")

_PAYLOAD_HASH = re.compile(r"sha256:[0-9a-f]{64}")
_EVIDENCE_HINT = (
    "give at least one piece of evidence the reviewer can check "
    "(a query result, file read, HTTP exchange or test run)"
)
_HASH_RULE = (
    "'sha256:' followed by the 64 lowercase hex digits of the SHA-256 of the payload's "
    "canonical JSON"
)


def evidence_list(
    raw: Mapping[Any, Any], where: str, errors: list[PacketError]
) -> tuple[Mapping[str, Any], ...] | None:
    """The packet's `evidence`: at least one evidence object, each checked."""
    if "evidence" not in raw:
        errors.append(PacketError(where, f"is required: {_EVIDENCE_HINT}"))
        return None
    items = bounded_list(
        raw["evidence"],
        where,
        errors,
        what="evidence objects",
        allow_empty=False,
        hint=_EVIDENCE_HINT,
    )
    if items is None:
        return None
    return all_valid([evidence_entry(item, f"{where}.{i}", errors) for i, item in enumerate(items)])


def evidence_entry(item: object, where: str, errors: list[PacketError]) -> dict[str, Any] | None:
    """One evidence object {kind, source, payload_hash}, with an optional payload and names."""
    if isinstance(item, str):
        errors.append(
            PacketError(
                where,
                "must be an evidence object {kind, source, payload_hash}, not a sentence: a "
                "sentence is an assertion, so point at the query, file, request or test run that "
                "shows it",
            )
        )
        return None
    if not isinstance(item, Mapping):
        errors.append(
            PacketError(
                where,
                f"must be an evidence object {{kind, source, payload_hash}}, not {json_kind(item)}",
            )
        )
        return None
    before = len(errors)
    for name in item:
        if name not in EVIDENCE_FIELDS:
            errors.append(
                PacketError(
                    field_loc(where, name),
                    "unknown field; evidence has only " + ", ".join(EVIDENCE_FIELDS),
                )
            )
    _check_kind(item, where, errors)
    _check_source(item, where, errors)
    _check_payload_hash(item, where, errors)
    if "payload" in item:
        _check_payload(item, where, errors)
    for name in ("datasource", "workspace"):
        if name in item:
            plain_text(item[name], f"{where}.{name}", errors, max_chars=NAME_MAX_CHARS)
    return dict(item) if len(errors) == before else None


def _check_kind(item: Mapping[Any, Any], where: str, errors: list[PacketError]) -> None:
    if "kind" in item and item["kind"] == HUMAN_ANSWER:
        errors.append(
            PacketError(
                f"{where}.kind",
                "is human_answer: a reviewer's answer is recorded by Bulkhead when a reviewer "
                "gives it, and an agent cannot hand one over; cite the query, file, request or "
                "test run that shows it",
            )
        )
    elif "kind" not in item:
        errors.append(PacketError(f"{where}.kind", f"is required: one of {_kinds()}"))
    elif not isinstance(item["kind"], str) or item["kind"] not in EVIDENCE_KINDS:
        errors.append(
            PacketError(f"{where}.kind", f"must be one of {_kinds()}, not {shown(item['kind'])}")
        )


def _check_source(item: Mapping[Any, Any], where: str, errors: list[PacketError]) -> None:
    if "source" not in item:
        errors.append(
            PacketError(
                f"{where}.source",
                "is required: the SQL, the file's path:start-end, the URL or the test command",
            )
        )
        return
    source = plain_text(item["source"], f"{where}.source", errors, max_chars=SOURCE_MAX_CHARS)
    if source is not None and cites_an_agent(source):
        errors.append(
            PacketError(
                f"{where}.source",
                f"cites another agent's text ({shown(source)}), which is not evidence: point at "
                "the query, file, request or test run that shows it",
            )
        )


def _check_payload_hash(item: Mapping[Any, Any], where: str, errors: list[PacketError]) -> None:
    if "payload_hash" not in item:
        errors.append(PacketError(f"{where}.payload_hash", f"is required: {_HASH_RULE}"))
    elif not isinstance(item["payload_hash"], str) or not _PAYLOAD_HASH.fullmatch(
        item["payload_hash"]
    ):
        errors.append(
            PacketError(
                f"{where}.payload_hash", f"must be {_HASH_RULE}, not {shown(item['payload_hash'])}"
            )
        )


def _check_payload(item: Mapping[Any, Any], where: str, errors: list[PacketError]) -> None:
    """A payload must be storable and be the one its hash was taken of: the reviewer sees it."""
    payload = item["payload"]
    if not isinstance(payload, Mapping):
        errors.append(
            PacketError(
                f"{where}.payload",
                f"must be an object (the payload the hash was taken of), not {json_kind(payload)}; "
                "omit it to send the hash alone",
            )
        )
        return
    bad = bad_strings(payload, f"{where}.payload")
    errors.extend(bad)
    claimed = item.get("payload_hash")
    if bad or not isinstance(claimed, str) or not _PAYLOAD_HASH.fullmatch(claimed):
        return  # the hash's own check names a bad hash
    try:
        actual = payload_hash(dict(payload))
    except (TypeError, ValueError):
        actual = claimed  # a value JSON cannot hold: named where it is
    if actual != claimed:
        errors.append(
            PacketError(
                f"{where}.payload_hash",
                f"is not the hash of the payload, which is {actual}: the reviewer "
                "is shown the payload, so it must be the one the hash vouches for",
            )
        )


def _kinds() -> str:
    return ", ".join(EVIDENCE_KINDS)
