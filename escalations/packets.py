"""Failure-packet validation: what an agent must hand a reviewer before it may stop.

Pure: takes the decoded JSON of `packet.submitted`'s `data.packet` and returns a `Packet` or every
error, each naming its field. Rules where the contract is silent:

- `ruled_out` is required but may be empty: the packet's contract names only `tried` and `evidence` as non-empty,
  and an agent that ruled nothing out should say so rather than invent a hypothesis.
- `options` may be omitted; when sent it must hold at least one option (an empty field is refused).
- Evidence entries are evidence objects only, never bare sentences: a sentence is an assertion
  (seed, Control 1). Another agent's text (an `agent:` source) and a person's answer
  (`human_answer`, which Bulkhead records when a reviewer gives it) are refused, naming the
  entry. Payload shape and hash are the verifier's to check, not the packet's.
- `task` is free text: the task's key or its description in words (the event's `data.task`
  names the task).
- One question: exactly one sentence ending in "?" once inline code is set aside; "a?b" inside a
  word or `x?` in backticks does not count, "Really??" counts once.
- `dedup_key` (optional): the agent's own name for its question, 1 to `DEDUP_KEY_MAX_CHARS`
  printable characters with no spaces or control characters. Packets of one fleet that send the
  same key ask the same question, whatever their words; otherwise the normalised question
  (`question_key`: case, spacing and punctuation set aside) decides.
- A packet is not a transcript: no transcript-like fields, at most `LIST_MAX_ITEMS` entries a list,
  and each free-text entry at most `ENTRY_MAX_CHARS` characters and `ENTRY_MAX_LINES` lines, with
  no more than one line opening with a speaker (`assistant:`, `user:`, ...).

The evidence entries are checked in `escalations.packet_evidence`, and the free text and lists
every field shares in `escalations.packet_fields`.
"""

import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from escalations.packet_evidence import (
    EVIDENCE_FIELDS,
    EVIDENCE_KINDS,
    NAME_MAX_CHARS,
    SOURCE_MAX_CHARS,
    evidence_list,
)
from escalations.packet_fields import (
    ENTRY_MAX_CHARS,
    ENTRY_MAX_LINES,
    LIST_MAX_ITEMS,
    NOT_TRANSCRIPT,
    PacketError,
    all_valid,
    bad_string,
    bounded_list,
    field_loc,
    free_text,
    json_kind,
    plain_text,
    printable,
)

__all__ = [
    "ENTRY_MAX_CHARS",
    "ENTRY_MAX_LINES",
    "EVIDENCE_FIELDS",
    "EVIDENCE_KINDS",
    "FIELDS",
    "LIST_MAX_ITEMS",
    "NAME_MAX_CHARS",
    "PACKET_MAX_BYTES",
    "DEDUP_KEY_MAX_CHARS",
    "QUESTION_MAX_CHARS",
    "SOURCE_MAX_CHARS",
    "TRANSCRIPT_FIELDS",
    "Packet",
    "PacketError",
    "RuledOut",
    "packet_size",
    "question_key",
    "same_question",
    "validate_packet",
]

PACKET_MAX_BYTES = 64 * 1024
QUESTION_MAX_CHARS = 500
DEDUP_KEY_MAX_CHARS = 200

FIELDS = (
    "task",
    "tried",
    "ruled_out",
    "evidence",
    "smallest_unblocking_question",
    "options",
    "urgency",
    "dedup_key",
)
OPTIONAL_FIELDS = ("options", "urgency", "dedup_key")
URGENCIES = ("low", "normal", "high")
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

_INLINE_CODE = re.compile(r"`[^`]*`")
# A "?" (or "?!", "??"; the Arabic "؟", "⁇", "⁈", "⁉") that ends a sentence: followed, past
# any closing quote or bracket, by whitespace or the end of the text. The full-width "？" of
# Chinese and Japanese ends one wherever it is: those scripts put no space after a sentence.
_QUESTION_END = re.compile(
    r"[?\u061f\u2047-\u2049][?!\u061f\u2047-\u2049]*[\"'\u201d\u2019)\]]*(?=\s|$)"
    r"|\uff1f[\uff1f\uff01?!]*"
)


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
    urgency: str = ""  # low, normal or high: how soon the fleet's due times want an answer
    dedup_key: str = ""

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
        if self.urgency:
            content["urgency"] = self.urgency
        if self.dedup_key:
            content["dedup_key"] = self.dedup_key
        return content


# Signs that change what a question asks: "+5%" and "-5%", "> 500" and "< 500" differ.
_MEANING = frozenset("+<>=%‰±≤≥≠≈")
_MINUS = frozenset("-\u2212")


def question_key(question: str) -> str:
    """The question with case, spacing and punctuation set aside: two agents asking the same
    thing in slightly different typing get the same key ("Which tier source?" and
    "which  tier source ?"). Signs and comparisons stay: "a discount of +5%?" and "of -5%?"
    are two questions, as are "> 500" and "< 500"."""
    folded = unicodedata.normalize("NFKC", question).casefold()
    kept = []
    for at, ch in enumerate(folded):
        after = folded[at + 1 : at + 2]
        if ch in _MINUS and after.isdigit() and not folded[at - 1 : at].isalnum():
            kept.append(" -")  # a negative number's sign, not a hyphen between words
        elif ch in _MEANING or unicodedata.category(ch) == "Sc":
            kept.append(f" {ch} ")
        elif unicodedata.category(ch) == "Cf":
            continue  # shows nothing (a zero-width space, a soft hyphen): no word is split
        elif unicodedata.category(ch).startswith(("P", "Z", "C", "S")):
            kept.append(" ")
        else:
            kept.append(ch)
    return " ".join("".join(kept).split())[:500]


def tried_words(tried: Iterable[str]) -> frozenset[str]:
    """The words of a packet's `tried`, as `question_key` reads a question: whether a packet
    says anything the packets before it did not, however its lines are split or typed."""
    return frozenset(question_key(" ".join(tried)).split())


def asks_again(
    question: str, dedup_key: str, tried: Iterable[str], answered: Iterable[Mapping[str, Any]]
) -> bool:
    """The packet asks what was answered (the same question as joining matches it: the same
    dedup_key, or the same normalised question) and its `tried` adds no word to what the
    answered packets had tried: nothing was learnt from the answer."""
    key = question_key(question)
    same = [
        p
        for p in answered
        if (dedup_key and p.get("dedup_key") == dedup_key)
        or question_key(str(p.get("smallest_unblocking_question", ""))) == key
    ]
    if not same:
        return False
    before = frozenset().union(*(tried_words(p.get("tried") or ()) for p in same))
    return tried_words(tried) <= before


# What a careless agent writes for a question or an attempt it did not describe.
PLACEHOLDERS = frozenset(
    {"todo", "tbd", "tba", "n a", "na", "none", "nothing", "null", "placeholder", "xxx", "same",
     "etc", "idk"}
)  # fmt: skip


# More letters than any placeholder is written with (the longest, "placeholder", has 11), in
# any characters NFKC folds into its letters: a text past it has words, and is read no further.
PLACEHOLDER_LETTERS = 40


def wordless(text: str) -> bool:
    """No words a person could act on: fewer than two letters (punctuation, a zero-width space,
    "?") or a placeholder ("TODO?", "n/a")."""
    letters = 0
    for ch in text:
        if unicodedata.category(ch).startswith("L"):
            letters += 1
            if letters > PLACEHOLDER_LETTERS:
                return False
    return letters < 2 or question_key(text) in PLACEHOLDERS


def same_question(*, key: str, dedup_key: str, other_key: str, other_dedup_key: str) -> bool:
    """Do two packets ask the same question? The same `dedup_key` says so whatever the words;
    two different `dedup_key`s say not, whatever the words; else the normalised questions."""
    if dedup_key and other_dedup_key:
        return dedup_key == other_dedup_key
    return bool(key) and key == other_key


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
                f"({NOT_TRANSCRIPT}: hand over the conclusion, not the work)",
            )
        ]
    if not isinstance(raw, Mapping):
        return [
            PacketError(loc, f"must be an object with the fields {_fields()}, not {json_kind(raw)}")
        ]

    errors: list[PacketError] = []
    errors.extend(_unknown_fields(raw, loc))
    task = _required_text(raw, "task", loc, errors, hint="name the task you are stuck on")
    tried = _text_list(raw, "tried", loc, errors, hint="list what you tried")
    ruled_out = _ruled_out(raw, f"{loc}.ruled_out", errors)
    evidence = evidence_list(raw, f"{loc}.evidence", errors)
    question = _question(raw, f"{loc}.smallest_unblocking_question", errors)
    options = _options(raw, f"{loc}.options", errors)
    urgency = _urgency(raw, f"{loc}.urgency", errors)
    dedup_key = _dedup_key(raw, f"{loc}.dedup_key", errors)
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
        urgency=urgency,
        dedup_key=dedup_key or "",
    )


def _urgency(raw: Mapping[Any, Any], where: str, errors: list[PacketError]) -> str:
    if "urgency" not in raw:
        return ""
    value = raw["urgency"]
    if isinstance(value, str) and value in URGENCIES:
        return value
    shown = f"'{printable(value[:50])}'" if isinstance(value, str) else json_kind(value)
    errors.append(
        PacketError(where, f"is {shown}; urgency is one of low, normal or high (or leave it out)")
    )
    return ""


def _dedup_key(raw: Mapping[Any, Any], where: str, errors: list[PacketError]) -> str | None:
    if "dedup_key" not in raw:
        return ""
    hint = (
        f"name the question in 1 to {DEDUP_KEY_MAX_CHARS} characters without spaces "
        "(packets that send the same key wait on one answer), or omit dedup_key"
    )
    value = raw["dedup_key"]
    if not isinstance(value, str):
        errors.append(PacketError(where, f"must be a string, not {json_kind(value)}: {hint}"))
        return None
    if not value:
        errors.append(PacketError(where, f"is empty: {hint}"))
        return None
    if len(value) > DEDUP_KEY_MAX_CHARS:
        errors.append(PacketError(where, f"is {len(value):,} characters: {hint}"))
        return None
    if any(ch.isspace() or not ch.isprintable() for ch in value) or bad_string(value, where):
        errors.append(PacketError(where, f"contains a space or a control character: {hint}"))
        return None
    shows_nothing = next((ch for ch in value if _shows_nothing(ch)), None)
    if shows_nothing is not None:
        errors.append(
            PacketError(
                where,
                f"contains U+{ord(shows_nothing):04X}, which shows nothing on its own (a filler, "
                f"a joiner or a combining mark): two keys would look alike: {hint}",
            )
        )
        return None
    return value


# Printable, yet nothing to see: the Hangul fillers, the blank braille pattern, and marks that
# only change the character before them (a key of precomposed letters reads the same).
_FILLERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def _shows_nothing(ch: str) -> bool:
    return ch in _FILLERS or unicodedata.category(ch) in ("Cf", "Mn", "Me")


def _unknown_fields(raw: Mapping[Any, Any], loc: str) -> list[PacketError]:
    errors = []
    for name in raw:
        if name in FIELDS:
            continue
        where = field_loc(loc, name)
        if isinstance(name, str) and name.lower() in TRANSCRIPT_FIELDS:
            errors.append(
                PacketError(
                    where,
                    f"{NOT_TRANSCRIPT}: drop '{printable(name)}' and put what matters in "
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
    return free_text(raw[name], where, errors, hint=hint)


def _text_list(
    raw: Mapping[Any, Any], name: str, loc: str, errors: list[PacketError], *, hint: str
) -> tuple[str, ...] | None:
    where = f"{loc}.{name}"
    if name not in raw:
        errors.append(PacketError(where, f"is required: {hint}, one entry per attempt"))
        return None
    items = bounded_list(raw[name], where, errors, what="strings", allow_empty=False, hint=hint)
    if items is None:
        return None
    texts = [free_text(item, f"{where}.{i}", errors, hint=hint) for i, item in enumerate(items)]
    for i, text in enumerate(texts):
        if text is not None and wordless(text):
            errors.append(PacketError(f"{where}.{i}", f"is {text!r}, a placeholder: {hint}"))
            texts[i] = None
    return all_valid(texts)


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
    items = bounded_list(raw["ruled_out"], where, errors, what="objects", allow_empty=True)
    if items is None:
        return None
    found: list[RuledOut | None] = []
    for i, item in enumerate(items):
        item_loc = f"{where}.{i}"
        if not isinstance(item, Mapping):
            errors.append(
                PacketError(
                    item_loc, f"must be an object {{hypothesis, how}}, not {json_kind(item)}"
                )
            )
            found.append(None)
            continue
        for name in item:
            if name not in ("hypothesis", "how"):
                errors.append(
                    PacketError(
                        field_loc(item_loc, name),
                        "unknown field; a ruled-out entry has only hypothesis and how",
                    )
                )
        hypothesis = _required_text(
            item, "hypothesis", item_loc, errors, hint="say what you suspected"
        )
        how = _required_text(item, "how", item_loc, errors, hint="say how you ruled it out")
        found.append(None if hypothesis is None or how is None else RuledOut(hypothesis, how))
    return all_valid(found)


def _question(raw: Mapping[Any, Any], where: str, errors: list[PacketError]) -> str | None:
    hint = f"ask the one question (at most {QUESTION_MAX_CHARS} characters) that unblocks you"
    if "smallest_unblocking_question" not in raw:
        errors.append(PacketError(where, f"is required: {hint}"))
        return None
    text = plain_text(raw["smallest_unblocking_question"], where, errors, max_chars=None, hint=hint)
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
    if wordless(text):
        errors.append(
            PacketError(where, f"is {text!r}, a placeholder, not a question: {hint}, in words")
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
    items = bounded_list(
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
        entry = free_text(item, f"{where}.{i}", errors, hint="say the option")
        entries.append(entry)
        if entry is None:
            continue
        same = seen.setdefault(entry.casefold(), i)
        if same != i:
            errors.append(
                PacketError(f"{where}.{i}", f"repeats option {same}; options must differ")
            )
    return all_valid(entries)


def _fields() -> str:
    required = [name for name in FIELDS if name not in OPTIONAL_FIELDS]
    return ", ".join(required) + " and (optionally) " + " and ".join(OPTIONAL_FIELDS)
