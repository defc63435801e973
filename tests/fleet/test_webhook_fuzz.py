"""A bounded fuzzer of signed webhook bodies: whatever an agent sends, never a 5xx, and every
refusal is the JSON error body naming what is wrong."""

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import task

EVENT_TYPES = [
    "run.started",
    "tasks.added",
    "task.started",
    "claim.posted",
    "claim.checked",
    "task.finished",
    "capability.changed",
    "packet.submitted",
]
FIELDS = [
    "run", "task", "tasks", "title", "policy", "attempt", "consumes", "checks", "refreshed",
    "claim", "verdict", "evidence", "outcome", "failure", "background_killed", "resumable",
    "artifacts", "capability", "status", "reason", "role", "packet", "agent", "about",
]  # fmt: skip
KEYS = st.sampled_from(["r1", "a", "b", "c.1", "", "x" * 300, "a/b", "..", "\x00"])

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
    | KEYS
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
data = st.dictionaries(st.sampled_from(FIELDS), values, max_size=6)
envelopes = st.fixed_dictionaries(
    {"type": st.sampled_from(EVENT_TYPES) | st.text(max_size=12), "data": data},
    optional={
        "timestamp": st.sampled_from(["2026-12-02T10:00:00Z", "yesterday", "9999-12-31T23:59:59Z"])
        | st.text(max_size=10)
    },  # noqa: E501
)


@settings(
    max_examples=250,
    derandomize=True,  # the same cases every run: CI is repeatable
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(envelope=envelopes)
def test_no_signed_body_gets_a_5xx(planner, coder, envelope: dict[str, Any]):
    planner.post("run.started", {"run": "r1", "tasks": [task("a"), task("b", prerequisites=["a"])]})
    body = json.dumps(envelope).encode()
    response = planner.post_raw(body, planner.headers(body))
    assert response.status_code < 500, (envelope, response.content)
    if response.status_code >= 400:
        errors = response.json()["errors"]
        assert errors and all(set(e) == {"loc", "msg"} and e["msg"] for e in errors), errors
