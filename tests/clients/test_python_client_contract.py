"""The Python client says what the server says: the same canonical JSON and payload hashes, the
same event fields, the same response fields, the same notification types."""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bulkhead_client.responses as client_responses
from bulkhead_client import canonical as client_hashing
from bulkhead_client.events import EVENT_MODELS, NOTIFICATION_TYPES
from fleet.events import DATA_MODELS
from fleet.outbox import EVENT_TYPES
from runs.claims import hashing as server_hashing

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
@settings(max_examples=200, derandomize=True, deadline=None)
def test_canonical_json_and_the_payload_hash_are_the_servers(value):
    try:
        expected = server_hashing.payload_hash(value)
    except ValueError:  # a lone surrogate: refused by both
        with pytest.raises(ValueError):
            client_hashing.payload_hash(value)
        return
    assert client_hashing.canonical_json(value) == server_hashing.canonical_json(value)
    assert client_hashing.payload_hash(value) == expected


@given(
    cells=st.lists(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(max_size=8),
        max_size=6,
    )
)
@settings(max_examples=100, derandomize=True, deadline=None)
def test_each_kinds_payload_is_the_servers(cells):
    columns = [f"c{i}" for i in range(len(cells))]
    assert client_hashing.query_result_payload(
        columns=columns, rows=[cells]
    ) == server_hashing.query_result_payload(columns=columns, rows=[cells])
    for build in ("test_run_payload", "http_exchange_payload", "file_read_payload"):
        args: dict[str, Any] = {
            "test_run_payload": {"command": "pytest -q", "exit_code": 1, "output_sha256": "a" * 64},
            "http_exchange_payload": {"method": "get", "url": "https://x/1", "status": 200, "body_sha256": "b" * 64},
            "file_read_payload": {"path": "a.yaml", "start": 2, "end": 3, "lines": ["x", "\ty"]},
        }[build]  # fmt: skip
        assert getattr(client_hashing, build)(**args) == getattr(server_hashing, build)(**args)
    assert client_hashing.split_lines("a\r\nb\n\nc\n") == server_hashing.split_lines(
        "a\r\nb\n\nc\n"
    )


def shape(schema: dict[str, Any], defs: dict[str, Any]) -> Any:
    """A JSON schema reduced to what a client must agree on: each object's fields and which
    are required, nested objects followed through $ref and `X | None`."""
    if "$ref" in schema:
        return shape(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    for union in ("anyOf", "oneOf"):
        if union in schema:
            branches = [shape(s, defs) for s in schema[union] if s.get("type") != "null"]
            return branches[0] if len(branches) == 1 else branches
    if schema.get("type") == "array":
        return ["array", shape(schema.get("items", {}), defs)]
    if "properties" in schema:
        return {
            "required": sorted(schema.get("required", [])),
            "fields": {k: shape(v, defs) for k, v in schema["properties"].items()},
        }
    return schema.get("type", "any")


@pytest.mark.parametrize("event_type", list(DATA_MODELS))
def test_every_events_fields_are_the_webhooks(event_type):
    server = DATA_MODELS[event_type].model_json_schema()
    client = EVENT_MODELS[event_type].model_json_schema()
    assert shape(client, client.get("$defs", {})) == shape(server, server.get("$defs", {}))


def test_every_event_and_notification_type_is_known_to_the_client():
    assert set(EVENT_MODELS) == set(DATA_MODELS)
    assert set(NOTIFICATION_TYPES) == set(EVENT_TYPES)


RESPONSES = {
    "RunOut": "RunOut", "TaskRow": "TaskRow", "ClaimRow": "ClaimRow", "DecisionRow": "DecisionRow",
    "ProgressRow": "ProgressRow", "HaltRow": "HaltRow", "WaitingEscalation": "WaitingEscalation",
    "BlastRadius": "BlastRadius", "FrontierOut": "FrontierOut", "Deferred": "Deferred",
    "ContextOut": "ContextOut", "PreviousAttempt": "PreviousAttempt", "EscalationOut": "EscalationOut",
    "EscalationRow": "EscalationRow", "EvidenceCheck": "EvidenceCheck", "AnswerOut": "AnswerOut",
    "WaitingTask": "WaitingTask",
}  # fmt: skip


def test_every_responses_fields_are_the_openapi_documents(client):
    doc = client.get("/api/v1/openapi.json").json()
    schemas = doc["components"]["schemas"]
    for component, model_name in RESPONSES.items():
        model = getattr(client_responses, model_name)
        documented = schemas[component]
        assert set(model.model_fields) == set(documented["properties"]), component
        required = {name for name, field in model.model_fields.items() if field.is_required()}
        assert required == set(documented["required"]), component
    # Every operation's 200 is one of them.
    for path in (
        "/api/v1/runs/{run}",
        "/api/v1/runs/{run}/frontier",
        "/api/v1/escalations/{escalation_id}",
    ):
        ref = doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"][
            "schema"
        ]["$ref"]
        assert ref.rsplit("/", 1)[-1] in RESPONSES


def test_the_clients_packet_has_every_field_a_packet_may_carry():
    from bulkhead_client.events import Packet
    from escalations.packets import FIELDS

    assert sorted(Packet.model_fields) == sorted(FIELDS)
    packet = Packet(task="plan", urgency="high", dedup_key="tier-source")
    assert packet.model_dump(exclude_none=True) == {
        "task": "plan",
        "urgency": "high",
        "dedup_key": "tier-source",
    }
