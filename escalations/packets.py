"""Failure-packet validation: what an agent must hand a reviewer before it may stop (DESIGN 7).

Pure: takes the decoded JSON of `packet.submitted`'s `data.packet` and returns a `Packet` or every
error, each naming its field. Rules where the contract is silent:

- `ruled_out` is required but may be empty: DESIGN names only `tried` and `evidence` as non-empty,
  and an agent that ruled nothing out should say so rather than invent a hypothesis.
- `options` may be omitted; when sent it must hold at least one option (an empty field is refused).
- Evidence entries are evidence objects only, never bare sentences: a sentence is an assertion
  (seed, Control 1). Payload shape and hash are the verifier's to check, not the packet's.
- One question: exactly one sentence ending in "?" once inline code is set aside; "a?b" inside a
  word or `x?` in backticks does not count, "Really??" counts once.
- A packet is not a transcript: no transcript-like fields, at most `LIST_MAX_ITEMS` entries a list,
  and each free-text entry at most `ENTRY_MAX_CHARS` characters and `ENTRY_MAX_LINES` lines, with
  no more than one line opening with a speaker (`assistant:`, `user:`, ...).
"""

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runs.claims.hashing import payload_hash

PACKET_MAX_BYTES = 64 * 1024
QUESTION_MAX_CHARS = 500
ENTRY_MAX_CHARS = 2_000
ENTRY_MAX_LINES = 10
LIST_MAX_ITEMS = 20
SOURCE_MAX_CHARS = 20_000  # the same bound as a claim's evidence source
NAME_MAX_CHARS = 200

EVIDENCE_KINDS = ("query_result", "file_read", "http_exchange", "test_run", "human_answer")
FIELDS = ("task", "tried", "ruled_out", "evidence", "smallest_unblocking_question", "options")
EVIDENCE_FIELDS = ("kind", "source", "payload_hash", "payload", "datasource", "workspace")
TRANSCRIPT_FIELDS = frozenset(
    {
        "transcript",
        "messages",
        "log",
        "logs",
        "history",
        "chat",
        "chat_history",
        "conversation",
        "trace",
        "turns",
        "tool_calls",
    }
)

_PAYLOAD_HASH = re.compile(r"sha256:[0-9a-f]{64}")
_SPEAKER_LINE = re.compile(
    r"^\s*(user|assistant|system|tool|human|ai|model|function)\s*:", re.IGNORECASE | re.MULTILINE
)
_INLINE_CODE = re.compile(r"`[^`]*`")
# A "?" (or "?!", "??") that ends a sentence: followed, past any closing quote or bracket, by
# whitespace or the end of the text.
_QUESTION_END = re.compile(r"\?[?!]*[\"'\u201d\u2019)\]]*(?=\s|$)")
_NOT_TRANSCRIPT = "a packet is not a transcript"


@dataclass(frozen=True)
class PacketError:
    loc: str
    msg: str


@dataclass(frozen=True)
class RuledOut:
    hypothesis: str
    how: str


@dataclass(frozen=True)
class Packet:
    task: str
    tried: tuple[str, ...]
    ruled_out: tuple[RuledOut, ...]
    evidence: tuple[Mapping[str, Any], ...]
    smallest_unblocking_question: str
    options: tuple[str, ...] = field(default=())

    def as_json(self) -> dict[str, Any]:
        """The packet as it is stored and shown: the shape the agent sent, text trimmed."""
        content: dict[str, Any] = {
            "task": self.task,
            "tried": list(self.tried),
            "ruled_out": [{"hypothesis": r.hypothesis, "how": r.how} for r in self.ruled_out],
            "evidence": [dict(entry) for entry in self.evidence],
            "smallest_unblocking_question": self.smallest_unblocking_question,
        }
        if self.options:
            content["options"] = list(self.options)
        return content


def packet_size(raw: object) -> int:
    """Bytes of the packet as compact UTF-8 JSON, the measure `PACKET_MAX_BYTES` applies to."""
    text = json.dumps(raw, separators=(",", ":"), ensure_ascii=False, default=str)
    return len(text.encode("utf-8", errors="surrogatepass"))


def validate_packet(raw: object, *, loc: str = "packet") -> Packet | list[PacketError]:
    """The packet, or an error for every bad field (never only the first)."""
    try:
        size = packet_size(raw)
    except (ValueError, RecursionError):
        return [PacketError(loc, "cannot be read as JSON: it refers to itself or nests too deep")]
    if size > PACKET_MAX_BYTES:
        return [
            PacketError(
                loc,
                f"is {size:,} bytes; a packet may be at most {PACKET_MAX_BYTES:,} bytes "
                f"({_NOT_TRANSCRIPT}: hand over the conclusion, not the work)",
            )
        ]
    if not isinstance(raw, Mapping):
        return [
            PacketError(loc, f"must be an object with the fields {_fields()}, not {_kind(raw)}")
        ]

    errors: list[PacketError] = []
    errors.extend(_unknown_fields(raw, loc))
    task = _required_text(raw, "task", loc, errors, hint="name the task you are stuck on")
    tried = _text_list(raw, "tried", loc, errors, hint="list what you tried")
    ruled_out = _ruled_out(raw, f"{loc}.ruled_out", errors)
    evidence = _evidence(raw, f"{loc}.evidence", errors)
    question = _question(raw, f"{loc}.smallest_unblocking_question", errors)
    options = _options(raw, f"{loc}.options", errors)
    if errors:
        return errors
    assert task is not None and tried is not None and ruled_out is not None
    assert evidence is not None and question is not None and options is not None
    return Packet(
        task=task,
        tried=tried,
        ruled_out=ruled_out,
        evidence=evidence,
        smallest_unblocking_question=question,
        options=options,
    )


def _unknown_fields(raw: Mapping[Any, Any], loc: str) -> list[PacketError]:
    errors = []
    for name in raw:
        if name in FIELDS:
            continue
        where = _at(loc, name)
        if isinstance(name, str) and name.lower() in TRANSCRIPT_FIELDS:
            errors.append(
                PacketError(
                    where,
                    f"{_NOT_TRANSCRIPT}: drop '{_printable(name)}' and put what matters in "
                    "tried, ruled_out and evidence",
                )
            )
        else:
            errors.append(PacketError(where, f"unknown field; a packet has only {_fields()}"))
    return errors


def _required_text(
    raw: Mapping[Any, Any], name: str, loc: str, errors: list[PacketError], *, hint: str
) -> str | None:
    where = f"{loc}.{name}"
    if name not in raw:
        errors.append(PacketError(where, f"is required: {hint}"))
        return None
    return _entry(raw[name], where, errors, hint=hint)


def _text_list(
    raw: Mapping[Any, Any], name: str, loc: str, errors: list[PacketError], *, hint: str
) -> tuple[str, ...] | None:
    where = f"{loc}.{name}"
    if name not in raw:
        errors.append(PacketError(where, f"is required: {hint}, one entry per attempt"))
        return None
    items = _list(raw[name], where, errors, what="strings", allow_empty=False, hint=hint)
    if items is None:
        return None
    return _all([_entry(item, f"{where}.{i}", errors, hint=hint) for i, item in enumerate(items)])


def _ruled_out(
    raw: Mapping[Any, Any], where: str, errors: list[PacketError]
) -> tuple[RuledOut, ...] | None:
    if "ruled_out" not in raw:
        errors.append(
            PacketError(
                where,
                "is required: list each hypothesis you ruled out and how, "
                "or send [] if you ruled nothing out",
            )
        )
        return None
    items = _list(raw["ruled_out"], where, errors, what="objects", allow_empty=True)
    if items is None:
        return None
    found: list[RuledOut | None] = []
    for i, item in enumerate(items):
        item_loc = f"{where}.{i}"
        if not isinstance(item, Mapping):
            errors.append(
                PacketError(item_loc, f"must be an object {{hypothesis, how}}, not {_kind(item)}")
            )
            found.append(None)
            continue
        for name in item:
            if name not in ("hypothesis", "how"):
                errors.append(
                    PacketError(
                        _at(item_loc, name),
                        "unknown field; a ruled-out entry has only hypothesis and how",
                    )
                )
        hypothesis = _required_text(
            item, "hypothesis", item_loc, errors, hint="say what you suspected"
        )
        how = _required_text(item, "how", item_loc, errors, hint="say how you ruled it out")
        found.append(None if hypothesis is None or how is None else RuledOut(hypothesis, how))
    return _all(found)


def _evidence(
    raw: Mapping[Any, Any], where: str, errors: list[PacketError]
) -> tuple[Mapping[str, Any], ...] | None:
    if "evidence" not in raw:
        errors.append(PacketError(where, f"is required: {_EVIDENCE_HINT}"))
        return None
    items = _list(
        raw["evidence"],
        where,
        errors,
        what="evidence objects",
        allow_empty=False,
        hint=_EVIDENCE_HINT,
    )
    if items is None:
        return None
    return _all([_evidence_entry(item, f"{where}.{i}", errors) for i, item in enumerate(items)])


_EVIDENCE_HINT = (
    "give at least one piece of evidence the reviewer can check "
    "(a query result, file read, HTTP exchange, test run or human answer)"
)


def _evidence_entry(item: object, where: str, errors: list[PacketError]) -> dict[str, Any] | None:
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
                f"must be an evidence object {{kind, source, payload_hash}}, not {_kind(item)}",
            )
        )
        return None
    before = len(errors)
    for name in item:
        if name not in EVIDENCE_FIELDS:
            errors.append(
                PacketError(
                    _at(where, name),
                    "unknown field; evidence has only " + ", ".join(EVIDENCE_FIELDS),
                )
            )
    if "kind" not in item:
        errors.append(PacketError(f"{where}.kind", f"is required: one of {_kinds()}"))
    elif not isinstance(item["kind"], str) or item["kind"] not in EVIDENCE_KINDS:
        errors.append(
            PacketError(f"{where}.kind", f"must be one of {_kinds()}, not {_shown(item['kind'])}")
        )
    if "source" not in item:
        errors.append(
            PacketError(
                f"{where}.source",
                "is required: the SQL, the file's path:start-end, the URL, the test command or "
                "reviewer:<user>",
            )
        )
    else:
        _plain_text(item["source"], f"{where}.source", errors, max_chars=SOURCE_MAX_CHARS)
    if "payload_hash" not in item:
        errors.append(PacketError(f"{where}.payload_hash", f"is required: {_HASH_RULE}"))
    elif not isinstance(item["payload_hash"], str) or not _PAYLOAD_HASH.fullmatch(
        item["payload_hash"]
    ):
        errors.append(
            PacketError(
                f"{where}.payload_hash", f"must be {_HASH_RULE}, not {_shown(item['payload_hash'])}"
            )
        )
    if "payload" in item:
        payload = item["payload"]
        if not isinstance(payload, Mapping):
            errors.append(
                PacketError(
                    f"{where}.payload",
                    f"must be an object (the payload the hash was taken of), not {_kind(payload)}; "
                    "omit it to send the hash alone",
                )
            )
        else:
            bad = _bad_strings(payload, f"{where}.payload")
            errors.extend(bad)
            claimed = item.get("payload_hash")
            if not bad and isinstance(claimed, str) and _PAYLOAD_HASH.fullmatch(claimed):
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
    for name in ("datasource", "workspace"):
        if name in item:
            _plain_text(item[name], f"{where}.{name}", errors, max_chars=NAME_MAX_CHARS)
    return dict(item) if len(errors) == before else None


_HASH_RULE = (
    "'sha256:' followed by the 64 lowercase hex digits of the SHA-256 of the payload's "
    "canonical JSON"
)


def _question(raw: Mapping[Any, Any], where: str, errors: list[PacketError]) -> str | None:
    hint = f"ask the one question (at most {QUESTION_MAX_CHARS} characters) that unblocks you"
    if "smallest_unblocking_question" not in raw:
        errors.append(PacketError(where, f"is required: {hint}"))
        return None
    text = _plain_text(
        raw["smallest_unblocking_question"], where, errors, max_chars=None, hint=hint
    )
    if text is None:
        return None
    if len(text) > QUESTION_MAX_CHARS:
        errors.append(
            PacketError(
                where,
                f"is {len(text):,} characters; {hint} — the reviewer should be able to answer it "
                "in 30 seconds",
            )
        )
        return None
    asked = len(_QUESTION_END.findall(_INLINE_CODE.sub("``", text)))
    if asked == 0:
        errors.append(PacketError(where, "is not a question: ask it, ending with '?'"))
        return None
    if asked > 1:
        errors.append(
            PacketError(
                where,
                f"asks {asked} questions; ask the one that unblocks you and put alternatives "
                "in options",
            )
        )
        return None
    return text


def _options(
    raw: Mapping[Any, Any], where: str, errors: list[PacketError]
) -> tuple[str, ...] | None:
    if "options" not in raw:
        return ()
    items = _list(
        raw["options"],
        where,
        errors,
        what="strings",
        allow_empty=False,
        hint="give the answers you see, or omit options",
    )
    if items is None:
        return None
    entries = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        entry = _entry(item, f"{where}.{i}", errors, hint="say the option")
        entries.append(entry)
        if entry is None:
            continue
        same = seen.setdefault(entry.casefold(), i)
        if same != i:
            errors.append(
                PacketError(f"{where}.{i}", f"repeats option {same}; options must differ")
            )
    return _all(entries)


def _list(
    value: object,
    where: str,
    errors: list[PacketError],
    *,
    what: str,
    allow_empty: bool,
    hint: str = "",
) -> list[Any] | None:
    if not isinstance(value, list | tuple):
        errors.append(PacketError(where, f"must be an array of {what}, not {_kind(value)}"))
        return None
    if not value and not allow_empty:
        errors.append(PacketError(where, f"is empty: {hint}"))
        return None
    if len(value) > LIST_MAX_ITEMS:
        errors.append(
            PacketError(
                where,
                f"has {len(value)} entries; at most {LIST_MAX_ITEMS} ({_NOT_TRANSCRIPT}: keep "
                "the ones that matter)",
            )
        )
        return None
    return list(value)


def _entry(value: object, where: str, errors: list[PacketError], *, hint: str) -> str | None:
    """A free-text entry: a sentence or a few lines, never a pasted transcript."""
    text = _plain_text(value, where, errors, max_chars=None, hint=hint)
    if text is None:
        return None
    problem = None
    lines = text.count("\n") + 1
    speakers = len(_SPEAKER_LINE.findall(text))
    if len(text) > ENTRY_MAX_CHARS:
        problem = f"is {len(text):,} characters; an entry may be at most {ENTRY_MAX_CHARS:,}"
    elif lines > ENTRY_MAX_LINES:
        problem = f"has {lines} lines; an entry may have at most {ENTRY_MAX_LINES}"
    elif speakers > 1:
        problem = (
            f"reads like a chat log ({speakers} lines open with a speaker such as 'assistant:')"
        )
    if problem is not None:
        errors.append(
            PacketError(where, f"{problem} — {_NOT_TRANSCRIPT}: say the gist in a sentence or two")
        )
        return None
    return text


def _plain_text(
    value: object, where: str, errors: list[PacketError], *, max_chars: int | None, hint: str = ""
) -> str | None:
    """A non-blank string that can be stored; returned trimmed."""
    if not isinstance(value, str):
        errors.append(PacketError(where, f"must be a string, not {_kind(value)}"))
        return None
    bad = _bad_string(value, where)
    if bad is not None:
        errors.append(bad)
        return None
    text = value.strip()
    if not text:
        errors.append(PacketError(where, f"is empty: {hint}" if hint else "is empty"))
        return None
    if max_chars is not None and len(text) > max_chars:
        errors.append(PacketError(where, f"is {len(text):,} characters; at most {max_chars:,}"))
        return None
    return text


def _bad_string(value: str, where: str) -> PacketError | None:
    if "\x00" in value:
        return PacketError(
            where, "contains a NUL byte (\\u0000), which cannot be stored; remove it"
        )
    if any("\ud800" <= ch <= "\udfff" for ch in value):
        return PacketError(
            where, "contains an unpaired surrogate (\\ud800-\\udfff), which is not valid UTF-8"
        )
    return None


def _bad_strings(value: object, where: str) -> list[PacketError]:
    """Every key or string under `value` that cannot be stored (iterative: payloads nest)."""
    found: list[PacketError] = []
    stack: list[tuple[object, str]] = [(value, where)]
    while stack:
        item, loc = stack.pop()
        if isinstance(item, str):
            bad = _bad_string(item, loc)
            if bad is not None:
                found.append(bad)
        elif isinstance(item, Mapping):
            for key, child in item.items():
                child_loc = _at(loc, key)
                if isinstance(key, str):
                    bad = _bad_string(key, child_loc)
                    if bad is not None:
                        found.append(PacketError(child_loc, "field name " + bad.msg))
                stack.append((child, child_loc))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{loc}.{i}") for i, child in enumerate(item))
    return sorted(found, key=lambda e: e.loc)


def _all[T](entries: list[T | None]) -> tuple[T, ...] | None:
    """The entries if every one was valid; None once any was not (its error is recorded)."""
    valid = tuple(entry for entry in entries if entry is not None)
    return valid if len(valid) == len(entries) else None


def _at(loc: str, name: object) -> str:
    return f"{loc}.{_printable(str(name))}"


def _printable(text: str) -> str:
    """`text` safe to echo back in an error: NUL and lone surrogates written as escapes."""
    return "".join(
        f"\\u{ord(ch):04x}" if ch == "\x00" or "\ud800" <= ch <= "\udfff" else ch for ch in text
    )


def _kind(value: object) -> str:
    """The JSON name of a value's type, as the agent's developer wrote it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _shown(value: object) -> str:
    if isinstance(value, str):
        return repr(value if len(value) <= 80 else value[:77] + "...")
    return _kind(value)


def _fields() -> str:
    return ", ".join(FIELDS[:-1]) + " and (optionally) " + FIELDS[-1]


def _kinds() -> str:
    return ", ".join(EVIDENCE_KINDS)
