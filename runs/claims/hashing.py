"""The one canonical JSON and payload hash for evidence, and the payload of each evidence kind."""

import hashlib
import json
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal, TypeGuard

EvidenceKind = Literal["query_result", "file_read", "test_run", "http_exchange"]

# The kinds a verifier can re-check against reality.
EVIDENCE_KINDS: Final[tuple[EvidenceKind, ...]] = (
    "query_result",
    "file_read",
    "test_run",
    "http_exchange",
)
# A reviewer's answer: verified by who recorded it, never re-checked by a verifier.
HUMAN_ANSWER: Final = "human_answer"

HASH_PREFIX: Final = "sha256:"
_HEX_DIGEST: Final = re.compile(r"[0-9a-f]{64}")
_PAYLOAD_HASH: Final = re.compile(r"sha256:[0-9a-f]{64}")


def canonical_json(value: object) -> bytes:
    """Keys sorted by code point, separators "," and ":", UTF-8, no ASCII escaping.

    Only JSON values are accepted (dict with str keys, list/tuple, str, int, finite float,
    bool, None): anything else would be coerced silently by `json.dumps` and hash differently
    in another language.
    """
    _check_json(value, "$", set())
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as error:
        reason = f"a string holds a lone surrogate, which UTF-8 cannot encode: {error}"
        raise ValueError(reason) from None


def payload_hash(payload: object) -> str:
    """`sha256:` + the hex SHA-256 of the payload's canonical JSON."""
    return HASH_PREFIX + sha256_hex(canonical_json(payload))


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_payload_hash(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and _PAYLOAD_HASH.fullmatch(value) is not None


def _check_json(value: object, where: str, open_containers: set[int]) -> None:
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: NaN and Infinity have no JSON form")
        return
    if isinstance(value, list | tuple | dict):
        if id(value) in open_containers:
            raise ValueError(f"{where}: circular reference")
        open_containers.add(id(value))
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise TypeError(f"{where}: object keys must be strings, not {key!r}")
                _check_json(item, f"{where}.{key}", open_containers)
        else:
            for index, item in enumerate(value):
                _check_json(item, f"{where}[{index}]", open_containers)
        open_containers.discard(id(value))
        return
    raise TypeError(f"{where}: {type(value).__name__} is not a JSON value")


# query_result ---------------------------------------------------------------------------------


def query_cell(value: object) -> None | bool | int | float | str:
    """One database value as it appears in a query_result row.

    NULL, booleans, integers and finite floats stay JSON values; NaN and the infinities become
    the strings PostgreSQL prints for them; binary values become PostgreSQL's bytea text form
    (`\\x` + lowercase hex); text stays text. Anything else must be passed in as the database's
    own text form (what `value::text` gives), which is how the verifier reads it.
    """
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    raise TypeError(
        f"{type(value).__name__} has no query_result form: pass the database's text form of it"
    )


def query_result_payload(
    *, columns: Sequence[str], rows: Iterable[Sequence[object]]
) -> dict[str, Any]:
    for column in columns:
        if not isinstance(column, str):
            raise TypeError(f"column names must be strings, not {column!r}")
    return {
        "columns": list(columns),
        "rows": [[query_cell(cell) for cell in row] for row in rows],
    }


# file_read ------------------------------------------------------------------------------------


def split_lines(content: str) -> list[str]:
    """The file's lines: split on "\\n" only ("\\r" stays), no empty line after a final "\\n"."""
    if content == "":
        return []
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def file_read_payload(*, path: str, start: int, end: int, lines: Sequence[str]) -> dict[str, Any]:
    """Lines `start`..`end` (1-based, inclusive) of `path`; `lines` are exactly those lines."""
    _check_int(start, "start")
    _check_int(end, "end")
    if not 1 <= start <= end:
        raise ValueError(f"the line range must have 1 <= start <= end, got {start}-{end}")
    if len(lines) != end - start + 1:
        raise ValueError(f"lines {start}-{end} are {end - start + 1} lines, got {len(lines)}")
    return {"path": path, "lines": [start, end], "text": "\n".join(lines)}


# test_run -------------------------------------------------------------------------------------


def test_run_payload(*, command: str, exit_code: int, output_sha256: str) -> dict[str, Any]:
    """`output_sha256`: hex SHA-256 of stdout and stderr as one stream (`2>&1`), every byte."""
    _check_int(exit_code, "exit_code")
    _check_hex_digest(output_sha256, "output_sha256")
    return {"command": command, "exit_code": exit_code, "output_sha256": output_sha256}


test_run_payload.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


# http_exchange --------------------------------------------------------------------------------


def http_exchange_payload(
    *, method: str, url: str, status: int, body_sha256: str
) -> dict[str, Any]:
    """`body_sha256`: hex SHA-256 of the body after Content-Encoding is undone (empty for HEAD)."""
    _check_int(status, "status")
    _check_hex_digest(body_sha256, "body_sha256")
    return {
        "request": {"method": method.upper(), "url": url},
        "response": {"status": status, "body_sha256": body_sha256},
    }


def _check_int(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, not {value!r}")


def _check_hex_digest(value: object, name: str) -> None:
    if not (isinstance(value, str) and _HEX_DIGEST.fullmatch(value)):
        raise ValueError(f"{name} must be 64 lowercase hex digits, not {value!r}")
