"""The webhook body read as strict JSON, and the values in it the database cannot store."""

import json
import math
import re
from collections import Counter
from typing import Any, Final

from fleet.errors import Refusal, error

JsonPath = tuple[Any, str | int]  # (the parent's JsonPath or None, this key or index)
MAX_DEPTH: Final = 64  # deeper JSON is no event: it would only exhaust the checks' recursion

_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPED = re.compile("[\x00\ud800-\udfff]")


def loads(text: str | bytes) -> tuple[object, list[dict[str, str]]]:
    """JSON as sent (RFC 8259: NaN, Infinity and -Infinity are not JSON, though Python's reader
    takes them), and the fields an object names twice (JSON would keep the last silently): they
    are refused with the event's other errors (`parse(..., repeated=...)`)."""
    repeated: dict[int, list[str]] = {}

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(items)
        if len(obj) != len(items):
            repeated[id(obj)] = [k for k, n in Counter(k for k, _ in items).items() if n > 1]
        return obj

    try:
        value = json.loads(text, object_pairs_hook=pairs, parse_constant=_not_json)
    except RecursionError:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep") from None
    deep: list[dict[str, str]] = []
    twice: list[dict[str, str]] = []
    # A path is (parent path, key), spelled out only for an error: this walks every value.
    stack: list[tuple[object, JsonPath | None, int]] = [(value, None, 0)]
    while stack:
        item, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            deep.append(error(_spelled(path), f"nested more than {MAX_DEPTH} levels deep"))
            continue
        if isinstance(item, dict):
            for name in repeated.get(id(item), ()):
                twice.append(error(_spelled((path, name)), "sent more than once in one object"))
            stack.extend((v, (path, k), depth + 1) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, (path, i), depth + 1) for i, v in enumerate(item))
    if deep:  # nothing deeper is checked: the checks themselves would recurse too far
        raise Refusal(sorted(deep + twice, key=lambda e: e["loc"]))
    return value, sorted(twice, key=lambda e: e["loc"])


def _spelled(path: JsonPath | None) -> str:
    parts: list[str] = []
    while path is not None:
        path, key = path
        parts.append(_printable(key) if isinstance(key, str) else str(key))
    return ".".join(reversed(parts))


def _not_json(literal: str) -> None:
    raise ValueError(f"{literal} is not a JSON value")


def unstorable(value: object, loc: str = "") -> list[dict[str, str]]:
    """Every value the database cannot store: a NUL byte, an unpaired surrogate (in a key or a
    string), a number outside the range of a double (1e999 reads as infinity)."""
    found: list[dict[str, str]] = []

    def where(path: JsonPath | None) -> str:  # spelled out only for an error
        spelled = _spelled(path)
        return f"{loc}.{spelled}" if loc and spelled else loc or spelled or "body"

    stack: list[tuple[object, JsonPath | None]] = [(value, None)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            problem = _unstorable(item)
            if problem:
                found.append(error(where(path), problem))
        elif isinstance(item, float) and not math.isfinite(item):
            found.append(error(where(path), "is a number outside the range of a double"))
        elif isinstance(item, dict):
            for key, child in item.items():
                problem = _unstorable(key)
                if problem:
                    found.append(error(where((path, key)), "field name " + problem))
                stack.append((child, (path, key)))
        elif isinstance(item, list):
            stack.extend((child, (path, i)) for i, child in enumerate(item))
    return sorted(found, key=lambda e: e["loc"])


def _unstorable(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL byte"
    if _SURROGATE.search(text):
        return "contains an unpaired surrogate (\\ud800-\\udfff), which is not valid Unicode"
    return None


def _printable(text: str) -> str:
    """A field name safe to echo back in a location: NUL and lone surrogates as escapes."""
    return _ESCAPED.sub(lambda match: f"\\u{ord(match.group()):04x}", text)
