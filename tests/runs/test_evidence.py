"""The canonical JSON, the payload hash, the payload of each kind, and the worked examples."""

import hashlib
import json
import math
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runs.claims import hashing as evidence
from runs.claims.hashing import (
    EVIDENCE_KINDS,
    canonical_json,
    file_read_payload,
    http_exchange_payload,
    payload_hash,
    query_cell,
    query_result_payload,
    sha256_hex,
    split_lines,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "evidence.md"

# The inputs of the worked examples in docs/evidence.md, built with the payload builders.
PRICING_YAML = '# pricing\ntiers:\n  loyalty_points_threshold: 500\n  discount: "10%"\n'
DOC_EXAMPLES: dict[str, dict[str, Any]] = {
    "the seed's real customers columns": query_result_payload(
        columns=["column_name"], rows=[["id"], ["name"], ["email"]]
    ),
    "the invented customer_tier column": query_result_payload(
        columns=["column_name"], rows=[["id"], ["name"], ["email"], ["customer_tier"]]
    ),
    "values of several types": query_result_payload(
        columns=["price", "active", "ratio", "note", "city"],
        rows=[["1.50", True, 0.1, None, "Zürich"]],
    ),
    "lines 3-4 of the pricing config": file_read_payload(
        path="config/pricing.yaml", start=3, end=4, lines=split_lines(PRICING_YAML)[2:4]
    ),
    "a passing pytest run": evidence.test_run_payload(
        command="pytest -q tests/test_discounts.py",
        exit_code=0,
        output_sha256=sha256_hex(b"..\n2 passed in 0.12s\n"),
    ),
    "a GET of a customer": http_exchange_payload(
        method="GET",
        url="https://api.example.com/v1/customers/42",
        status=200,
        body_sha256=sha256_hex(b'{"id":42,"tier":null}'),
    ),
}


def documented_examples() -> list[tuple[str, str]]:
    """(canonical bytes, payload_hash) of every worked example on the page."""
    pattern = r"```json\n([^\n]*)\n```\n\n\*\*payload_hash:\*\* `(sha256:[0-9a-f]{64})`"
    return re.findall(pattern, DOC.read_text(encoding="utf-8"))


def test_it_sorts_keys_and_leaves_no_whitespace() -> None:
    assert canonical_json({"b": 1, "a": [1, {"d": None, "c": True}]}) == (
        b'{"a":[1,{"c":true,"d":null}],"b":1}'
    )


def test_it_writes_utf8_without_ascii_escapes() -> None:
    assert canonical_json({"city": "Zürich ✓"}) == '{"city":"Zürich ✓"}'.encode()


def test_it_escapes_only_quotes_backslashes_and_control_characters() -> None:
    text = 'a"b\\c\n\t\x01/\x7f\u2028'
    assert canonical_json(text) == b'"a\\"b\\\\c\\n\\t\\u0001/\x7f\xe2\x80\xa8"'


def test_it_sorts_keys_by_code_point() -> None:
    keys = ["b", "a", "Z", "é", "\U0001f600", "\uff21"]
    assert list(json.loads(canonical_json(dict.fromkeys(keys, 0)))) == sorted(keys)
    assert canonical_json({"\U0001f600": 0, "\uff21": 0}).index("\uff21".encode()) < 5


def test_it_writes_integers_in_full_and_floats_as_python_repr() -> None:
    assert canonical_json([12345678901234567890, 1.0, 0.1, 1e-05, 1e16]) == (
        b"[12345678901234567890,1.0,0.1,1e-05,1e+16]"
    )


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, {"x": [math.nan]}])
def test_it_refuses_nan_and_infinity(value: object) -> None:
    with pytest.raises(ValueError, match="NaN and Infinity"):
        canonical_json(value)


@pytest.mark.parametrize("value", [{1: "a"}, {None: "a"}, {("a",): 1}])
def test_it_refuses_keys_that_are_not_strings(value: object) -> None:
    with pytest.raises(TypeError, match="keys must be strings"):
        canonical_json(value)


@pytest.mark.parametrize("value", [Decimal("1.5"), {1, 2}, b"bytes", object()])
def test_it_refuses_values_that_are_not_json(value: object) -> None:
    with pytest.raises(TypeError, match="not a JSON value"):
        canonical_json(value)


def test_it_refuses_lone_surrogates() -> None:
    with pytest.raises(ValueError, match="lone surrogate"):
        canonical_json("\ud800")


def test_it_refuses_circular_values() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="circular"):
        canonical_json(loop)


def test_the_same_value_twice_is_not_circular() -> None:
    shared = [1]
    assert canonical_json([shared, shared]) == b"[[1],[1]]"


def test_a_payload_hash_is_sha256_of_the_canonical_bytes() -> None:
    payload = {"columns": ["column_name"], "rows": [["id"]]}
    digest = hashlib.sha256(b'{"columns":["column_name"],"rows":[["id"]]}').hexdigest()
    assert payload_hash(payload) == f"sha256:{digest}"
    assert evidence.is_payload_hash(payload_hash(payload))
    assert not evidence.is_payload_hash("sha256:" + digest.upper())
    assert not evidence.is_payload_hash(digest)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_canonical_json_reads_back_to_the_same_value(value: object) -> None:
    assert json.loads(canonical_json(value)) == value


@given(json_values)
def test_canonical_json_is_a_fixed_point(value: object) -> None:
    once = canonical_json(value)
    assert canonical_json(json.loads(once)) == once


@given(st.dictionaries(st.text(max_size=6), st.integers(), max_size=8), st.randoms())
def test_key_order_does_not_change_the_hash(mapping: dict[str, int], random: Any) -> None:
    items = list(mapping.items())
    random.shuffle(items)
    assert payload_hash(dict(items)) == payload_hash(mapping)


def test_the_kinds_are_the_four_of_the_contract() -> None:
    assert EVIDENCE_KINDS == ("query_result", "file_read", "test_run", "http_exchange")


def test_a_query_result_keeps_json_values_and_writes_the_rest_as_text() -> None:
    payload = query_result_payload(
        columns=["a", "b", "c", "d", "e", "f", "g"],
        rows=[(None, True, 42, 0.5, "text", b"\x01\xff", math.nan)],
    )
    assert payload == {
        "columns": ["a", "b", "c", "d", "e", "f", "g"],
        "rows": [[None, True, 42, 0.5, "text", "\\x01ff", "NaN"]],
    }
    assert query_cell(math.inf) == "Infinity"
    assert query_cell(-math.inf) == "-Infinity"


def test_a_query_result_refuses_values_without_a_defined_form() -> None:
    with pytest.raises(TypeError, match="database's text form"):
        query_result_payload(columns=["price"], rows=[[Decimal("1.50")]])


@pytest.mark.parametrize(
    ("content", "lines"),
    [
        ("", []),
        ("one", ["one"]),
        ("one\n", ["one"]),
        ("one\n\n", ["one", ""]),
        ("one\r\ntwo\r\n", ["one\r", "two\r"]),
        ("\ufeffone\ntwo", ["\ufeffone", "two"]),
        ("a\u2028b\x0cc\n", ["a\u2028b\x0cc"]),
    ],
)
def test_a_file_splits_on_newlines_only(content: str, lines: list[str]) -> None:
    assert split_lines(content) == lines


def test_a_file_read_joins_its_lines_with_newlines() -> None:
    payload = file_read_payload(path="a.txt", start=2, end=3, lines=["two", "three"])
    assert payload == {"path": "a.txt", "lines": [2, 3], "text": "two\nthree"}


@pytest.mark.parametrize(("start", "end"), [(0, 1), (3, 2), (-1, 1)])
def test_a_file_read_refuses_a_backwards_or_zero_range(start: int, end: int) -> None:
    with pytest.raises(ValueError, match="start <= end"):
        file_read_payload(path="a.txt", start=start, end=end, lines=["x"])


def test_a_file_read_needs_exactly_the_lines_of_its_range() -> None:
    with pytest.raises(ValueError, match="are 2 lines"):
        file_read_payload(path="a.txt", start=1, end=2, lines=["x"])


def test_test_runs_and_http_exchanges_need_hex_digests_and_integers() -> None:
    with pytest.raises(ValueError, match="64 lowercase hex"):
        evidence.test_run_payload(command="pytest", exit_code=0, output_sha256="abc")
    with pytest.raises(TypeError, match="integer"):
        evidence.test_run_payload(command="pytest", exit_code=True, output_sha256="0" * 64)
    with pytest.raises(ValueError, match="64 lowercase hex"):
        http_exchange_payload(method="GET", url="http://x", status=200, body_sha256="A" * 64)


def test_an_http_exchange_writes_its_method_in_capitals() -> None:
    payload = http_exchange_payload(method="get", url="http://x/", status=200, body_sha256="0" * 64)
    assert payload["request"] == {"method": "GET", "url": "http://x/"}


def test_the_documented_examples_hash_as_the_code_does() -> None:
    examples = documented_examples()
    assert len(examples) == len(DOC_EXAMPLES)
    for canonical, documented_hash in examples:
        assert canonical_json(json.loads(canonical)) == canonical.encode("utf-8")
        assert payload_hash(json.loads(canonical)) == documented_hash


@pytest.mark.parametrize("name", DOC_EXAMPLES)
def test_each_documented_example_is_what_the_builders_give(name: str) -> None:
    payload = DOC_EXAMPLES[name]
    documented = dict(documented_examples())
    canonical = canonical_json(payload).decode("utf-8")
    assert canonical in documented, f"{name} is not on the page as {canonical}"
    assert documented[canonical] == payload_hash(payload)


def test_the_readmes_worked_examples_are_the_pages_and_hash_as_the_code_does() -> None:
    readme = DOC.parents[1] / "README.md"
    pattern = r"```json\n([^\n]*)\n```\n\n\*\*payload_hash:\*\* `(sha256:[0-9a-f]{64})`"
    examples = re.findall(pattern, readme.read_text(encoding="utf-8"))
    kinds = {"lines": "file_read", "command": "test_run", "request": "http_exchange"}
    assert sorted(kinds[next(iter(json.loads(c)))] for c, _ in examples) == sorted(kinds.values())
    for canonical, documented_hash in examples:
        assert (canonical, documented_hash) in documented_examples()
        assert payload_hash(json.loads(canonical)) == documented_hash


def test_the_page_shows_every_kind_and_the_digests_it_quotes() -> None:
    text = DOC.read_text(encoding="utf-8")
    for kind in EVIDENCE_KINDS:
        assert f"## {kind}" in text
    assert sha256_hex(b"..\n2 passed in 0.12s\n") in text
    assert sha256_hex(b'{"id":42,"tier":null}') in text
    assert sha256_hex(b"") in text
