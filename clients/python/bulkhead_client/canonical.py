"""Canonical JSON and the evidence payload hash, byte for byte as Bulkhead computes them.

`payload_hash` is `sha256:` + the hex SHA-256 of the payload's canonical JSON: keys sorted by code
point, separators `,` and `:`, UTF-8 with no `\\u` escaping. Each kind's payload has one shape.
"""

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "canonical_json",
    "file_read_payload",
    "http_exchange_payload",
    "payload_hash",
    "query_cell",
    "query_result_payload",
    "sha256_hex",
    "split_lines",
    "test_run_payload",
]

HASH_PREFIX = "sha256:"


def canonical_json(value: object) -> bytes:
    """Only JSON values (no NaN, no non-string keys): anything else would hash differently
    in another language, so it is refused rather than coerced."""
    _check_json(value, "$", set())
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"a string holds a lone surrogate, which UTF-8 cannot encode: {exc}"
        ) from None


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def payload_hash(payload: object) -> str:
    """`sha256:` + the hex SHA-256 of the payload's canonical JSON."""
    return HASH_PREFIX + sha256_hex(canonical_json(payload))


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


def query_cell(value: object) -> None | bool | int | float | str:
    """A database value as the verifier reads it: NULL, booleans, integers, finite floats and
    text as they are; NaN/Infinity as PostgreSQL prints them; binary as `\\x` + hex. Anything
    else (dates, decimals, UUIDs) must be selected as text (`value::text`, `CAST(… AS TEXT)`)."""
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
        f"{type(value).__name__} has no query_result form: select it as text "
        "(value::text on PostgreSQL), which is how the verifier reads it"
    )


def query_result_payload(
    *, columns: Sequence[str], rows: Iterable[Sequence[object]]
) -> dict[str, Any]:
    for column in columns:
        if not isinstance(column, str):
            raise TypeError(f"column names must be strings, not {column!r}")
    return {"columns": list(columns), "rows": [[query_cell(c) for c in row] for row in rows]}


def split_lines(content: str) -> list[str]:
    """A file's lines: split on "\\n" only ("\\r" stays), no empty line after a final "\\n"."""
    if content == "":
        return []
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def file_read_payload(*, path: str, start: int, end: int, lines: Sequence[str]) -> dict[str, Any]:
    """Lines `start`..`end` (1-based, inclusive) of `path`, joined by "\\n"."""
    _check_int(start, "start")
    _check_int(end, "end")
    if not 1 <= start <= end:
        raise ValueError(f"the line range must have 1 <= start <= end, got {start}-{end}")
    if len(lines) != end - start + 1:
        raise ValueError(f"lines {start}-{end} are {end - start + 1} lines, got {len(lines)}")
    return {"path": path, "lines": [start, end], "text": "\n".join(lines)}


def test_run_payload(*, command: str, exit_code: int, output_sha256: str) -> dict[str, Any]:
    """`output_sha256`: hex SHA-256 of stdout and stderr as one stream (`2>&1`), every byte."""
    _check_int(exit_code, "exit_code")
    _check_hex(output_sha256, "output_sha256")
    return {"command": command, "exit_code": exit_code, "output_sha256": output_sha256}


test_run_payload.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def http_exchange_payload(
    *, method: str, url: str, status: int, body_sha256: str
) -> dict[str, Any]:
    """`body_sha256`: hex SHA-256 of the body after Content-Encoding is undone (empty for HEAD)."""
    _check_int(status, "status")
    _check_hex(body_sha256, "body_sha256")
    return {
        "request": {"method": method.upper(), "url": url},
        "response": {"status": status, "body_sha256": body_sha256},
    }


def _check_int(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, not {value!r}")


def _check_hex(value: object, name: str) -> None:
    ok = isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
    if not ok:
        raise ValueError(f"{name} must be 64 lowercase hex digits, not {value!r}")
