"""The packet's field checks: free text, bounded lists, and the error that names a field. Pure."""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ENTRY_MAX_CHARS = 2_000
ENTRY_MAX_LINES = 10
LIST_MAX_ITEMS = 20

_SURROGATE = re.compile("[\ud800-\udfff]")  # unpaired: a str holds no pairs
_SPEAKER_LINE = re.compile(
    r"^\s*(user|assistant|system|tool|human|ai|model|function)\s*:", re.IGNORECASE | re.MULTILINE
)
NOT_TRANSCRIPT = "a packet is not a transcript"


# Each check appends a PacketError per problem to the caller's list and returns the value, or None
# when it is not valid, so that a packet's every bad field is named at once, not only the first.
@dataclass(frozen=True)
class PacketError:
    loc: str
    msg: str


def bounded_list(
    value: object,
    where: str,
    errors: list[PacketError],
    *,
    what: str,
    allow_empty: bool,
    hint: str = "",
) -> list[Any] | None:
    """An array of at most `LIST_MAX_ITEMS` entries (empty only when `allow_empty`)."""
    if not isinstance(value, list | tuple):
        errors.append(PacketError(where, f"must be an array of {what}, not {json_kind(value)}"))
        return None
    if not value and not allow_empty:
        errors.append(PacketError(where, f"is empty: {hint}"))
        return None
    if len(value) > LIST_MAX_ITEMS:
        errors.append(
            PacketError(
                where,
                f"has {len(value)} entries; at most {LIST_MAX_ITEMS} ({NOT_TRANSCRIPT}: keep "
                "the ones that matter)",
            )
        )
        return None
    return list(value)


def free_text(value: object, where: str, errors: list[PacketError], *, hint: str) -> str | None:
    """A free-text entry: a sentence or a few lines, never a pasted transcript."""
    text = plain_text(value, where, errors, max_chars=None, hint=hint)
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
            PacketError(where, f"{problem} — {NOT_TRANSCRIPT}: say the gist in a sentence or two")
        )
        return None
    return text


def plain_text(
    value: object, where: str, errors: list[PacketError], *, max_chars: int | None, hint: str = ""
) -> str | None:
    """A non-blank string that can be stored; returned trimmed."""
    if not isinstance(value, str):
        errors.append(PacketError(where, f"must be a string, not {json_kind(value)}"))
        return None
    bad = bad_string(value, where)
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


def bad_string(value: str, where: str) -> PacketError | None:
    """Why a string cannot be stored (a NUL byte, an unpaired surrogate), or None."""
    if "\x00" in value:
        return PacketError(
            where, "contains a NUL byte (\\u0000), which cannot be stored; remove it"
        )
    if _SURROGATE.search(value):
        return PacketError(
            where, "contains an unpaired surrogate (\\ud800-\\udfff), which is not valid UTF-8"
        )
    return None


def bad_strings(value: object, where: str) -> list[PacketError]:
    """Every key or string under `value` that cannot be stored (iterative: payloads nest)."""
    found: list[PacketError] = []
    stack: list[tuple[object, str]] = [(value, where)]
    while stack:
        item, loc = stack.pop()
        if isinstance(item, str):
            bad = bad_string(item, loc)
            if bad is not None:
                found.append(bad)
        elif isinstance(item, Mapping):
            for key, child in item.items():
                child_loc = field_loc(loc, key)
                if isinstance(key, str):
                    bad = bad_string(key, child_loc)
                    if bad is not None:
                        found.append(PacketError(child_loc, "field name " + bad.msg))
                stack.append((child, child_loc))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{loc}.{i}") for i, child in enumerate(item))
    return sorted(found, key=lambda e: e.loc)


def all_valid[T](entries: list[T | None]) -> tuple[T, ...] | None:
    """The entries if every one was valid; None once any was not (its error is recorded)."""
    valid = tuple(entry for entry in entries if entry is not None)
    return valid if len(valid) == len(entries) else None


def field_loc(loc: str, name: object) -> str:
    """The location of field `name` under `loc`, safe to echo back."""
    return f"{loc}.{printable(str(name))}"


def printable(text: str) -> str:
    """`text` safe to echo back in an error: NUL and lone surrogates written as escapes."""
    return "".join(
        f"\\u{ord(ch):04x}" if ch == "\x00" or "\ud800" <= ch <= "\udfff" else ch for ch in text
    )


def json_kind(value: object) -> str:
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


def shown(value: object) -> str:
    """A bad value as an error quotes it: a string cut to 80 characters, else its JSON type."""
    if isinstance(value, str):
        return repr(value if len(value) <= 80 else value[:77] + "...")
    return json_kind(value)
