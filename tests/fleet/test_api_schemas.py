"""The read API's response schemas: the JSON is what the handlers return, and OpenAPI names it.

Ninja filters a response through its schema, so a field the schema lacks would vanish: every
response of the demo's runs (claims with evidence and blast radius, decisions with causes and
ground truth, progress lines, a failed run, an escalation with its packet, then its answer) is
compared byte for byte with the raw selector output, encoded as the API encoded it before.
"""

import json
from typing import Any

import pytest
from django.test import RequestFactory
from django.utils import timezone
from ninja.responses import NinjaJSONEncoder

import fleet.api  # noqa: F401 - first: it imports the routes' modules, which import it
from escalations import services as desk
from escalations.models import Escalation
from escalations.selectors.runs import run_detail
from fleet import demo, services
from fleet.api import escalations as escalations_api
from fleet.api import runs as runs_api
from fleet.models import ApiToken, Delivery, Fleet
from fleet.stories import all_green, hung_test_run
from runs import context
from runs.models import Run, Task


def encoded(raw: Any) -> bytes:
    """The body as the API rendered an untyped dict (ninja's JSONRenderer)."""
    return json.dumps(raw, cls=NinjaJSONEncoder).encode()


def request_for(fleet: Fleet) -> Any:
    request = RequestFactory().get("/api/v1/")
    request.fleet_ids = [fleet.pk]
    return request


def assert_every_response_is_the_raw_output(client: Any, fleet: Fleet, token: str) -> None:
    request = request_for(fleet)

    def same(path: str, raw: Any) -> None:
        response = client.get(f"/api/v1{path}", HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 200, response.content
        assert response.content == encoded(raw), path

    for run in Run.objects.filter(fleet=fleet).select_related("fleet"):
        same(f"/runs/{run.key}", run_detail(run))
        same(f"/runs/{run.key}/frontier", runs_api.run_frontier(request, run.key, None))
        for task in Task.objects.filter(run=run).select_related("run", "agent"):
            same(f"/runs/{run.key}/tasks/{task.key}/context", context.next_attempt(task))
    for escalation in Escalation.objects.filter(fleet=fleet):
        same(
            f"/escalations/{escalation.pk}",
            escalations_api.escalation_detail(request, escalation.pk),
        )


@pytest.mark.django_db(transaction=True)
def test_every_response_is_byte_for_byte_what_the_handlers_return(
    client, settings, tmp_path, monkeypatch
):
    settings.VAR_DIR = tmp_path
    demo.load()
    fleet = Fleet.objects.get(name=demo.FLEET)
    _, token = ApiToken.issue(fleet.agents.order_by("created_at").first())
    # An unchecked claim's blast radius counts minutes to now: one clock for both sides.
    now = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: now)

    # The data is as rich as the contract: nothing the schemas describe goes unexercised.
    details = [run_detail(run) for run in Run.objects.filter(fleet=fleet)]
    claims = [c for d in details for c in d["claims"]]
    decisions = [x for d in details for x in d["decisions"]]
    assert any(c["blast_radius"] and c["blast_radius"]["tasks"] for c in claims)
    assert {c["status"] for c in claims} >= {"verified", "refuted", "unverified"}
    assert any(x["cause"] for x in decisions) and any(x["ground_truth"] for x in decisions)
    assert any(p["killed"] for d in details for p in d["progress"])
    assert any(d["cause"] for d in details if d["run"] == hung_test_run.RUN)
    assert any(t["blockers"] for d in details for t in d["tasks"])
    escalation = Escalation.objects.get(run__key=all_green.RUN)
    assert escalation.packet and escalation.packet.content["evidence"][0]["payload"]
    assert_every_response_is_the_raw_output(client, fleet, token)

    # Claimed, then answered: the answer, the reviewer and the reframe's ground truth.
    reviewer, _ = services.member_add(username="rita", fleet=fleet, role="reviewer")
    desk.escalation_claim(escalation=escalation, reviewer=reviewer)
    desk.escalation_answer(escalation=escalation, reviewer=reviewer, text=all_green.ANSWER)
    answered = escalations_api.escalation_detail(request_for(fleet), escalation.pk)
    assert answered["answer"]["by"] == "rita" and answered["claimed_by"] == "rita"
    assert context.next_attempt(escalation.task)["ground_truth"]
    assert_every_response_is_the_raw_output(client, fleet, token)

    missing = client.get("/api/v1/escalations/999999", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert missing.status_code == 404
    assert missing.json() == {"errors": [{"loc": "path", "msg": "no escalation 999999"}]}
    malformed = client.get("/api/v1/escalations/abc", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert malformed.status_code == 422
    assert malformed.json()["errors"][0]["loc"] == "path.escalation_id"


def schema_of(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """Follow a $ref, or the one non-null branch of an `X | None`."""
    if "anyOf" in schema:
        (schema,) = [s for s in schema["anyOf"] if s.get("type") != "null"]
    if "$ref" in schema:
        return schema_of(doc, doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]])
    return schema


def fields(doc: dict[str, Any], schema: dict[str, Any], *path: str) -> dict[str, Any]:
    """The properties of a schema, or of the one reached by `path` (a list goes to its items)."""
    schema = schema_of(doc, schema)
    for name in path:
        schema = schema_of(doc, schema["properties"][name])
        if schema.get("type") == "array":
            schema = schema_of(doc, schema["items"])
    assert set(schema["required"]) == set(schema["properties"]), "every field is always there"
    return schema["properties"]


RUN = "/api/v1/runs/{run}"
FRONTIER = "/api/v1/runs/{run}/frontier"
CONTEXT = "/api/v1/runs/{run}/tasks/{task}/context"
ESCALATION = "/api/v1/escalations/{escalation_id}"


def test_openapi_describes_every_field_and_the_errors(client):
    doc = client.get("/api/v1/openapi.json").json()
    ok = {}
    for path in (RUN, FRONTIER, CONTEXT, ESCALATION):
        responses = doc["paths"][path]["get"]["responses"]
        # A run's key may be in several of a person's fleets: a 409 asks which.
        errors = {"401", "404", "422"} if path == ESCALATION else {"401", "404", "409"}
        assert set(responses) == {"200", *errors}, path
        for status in errors:
            error = responses[status]["content"]["application/json"]["schema"]
            assert set(fields(doc, error)) == {"errors"}
            assert set(fields(doc, error, "errors")) == {"loc", "msg"}
        ok[path] = responses["200"]["content"]["application/json"]["schema"]
        assert "$ref" in ok[path], path

    run = fields(doc, ok[RUN])
    assert {"run", "fleet", "title", "policy", "state", "cause", "started_at"} <= set(run)
    assert {"tasks", "claims", "decisions", "progress"} <= set(run)
    assert {"key", "state", "ready", "blockers", "prerequisites"} <= set(
        fields(doc, ok[RUN], "tasks")
    )
    claim = fields(doc, ok[RUN], "claims")
    assert {"key", "task", "statement", "status", "blast_radius"} <= set(claim)
    assert claim["status"]["enum"] == ["unverified", "verified", "refuted"]
    radius = fields(doc, claim["blast_radius"])
    assert set(radius) == {"agents", "artifacts", "minutes", "tasks"}
    assert radius["agents"]["type"] == "integer" and radius["minutes"]["type"] == "number"
    assert radius["tasks"]["type"] == "array" and radius["tasks"]["items"] == {"type": "string"}
    decision = fields(doc, ok[RUN], "decisions")
    assert {"action", "reason", "cause", "ground_truth", "at"} <= set(decision)
    assert decision["ground_truth"]["items"] == {"additionalProperties": True, "type": "object"}
    assert {"task", "text", "killed", "at"} == set(fields(doc, ok[RUN], "progress"))
    assert fields(doc, ok[RUN], "progress")["at"]["format"] == "date-time"

    frontier = fields(doc, ok[FRONTIER])
    assert set(frontier) == {"policy", "ready", "deferred"}
    assert frontier["ready"]["items"] == {"type": "string"}
    assert set(fields(doc, ok[FRONTIER], "deferred")) == {"task", "blockers"}

    assert {
        "run",
        "task",
        "state",
        "agent",
        "blockers",
        "decision",
        "ground_truth",
        "scope",
    } <= set(fields(doc, ok[CONTEXT]))
    escalation = fields(doc, ok[ESCALATION])
    assert {"id", "run", "task", "status", "question", "packet", "answer"} <= set(escalation)
    assert set(fields(doc, ok[ESCALATION], "answer")) == {"text", "by", "at"}


def test_the_openapi_document_types_the_packet_with_every_field_the_desk_accepts(client):
    """`data.packet` is validated by the desk, field by field; the document still names each
    field, so that a generated client has the packet typed."""
    from escalations.packets import FIELDS, QUESTION_MAX_CHARS, URGENCIES

    schemas = client.get("/api/v1/openapi.json").json()["components"]["schemas"]
    assert schemas["PacketSubmittedData"]["properties"]["packet"] == {
        "$ref": "#/components/schemas/Packet"
    }
    packet = schemas["Packet"]
    assert sorted(packet["properties"]) == sorted(FIELDS)
    assert packet["additionalProperties"] is False
    urgency = packet["properties"]["urgency"]["anyOf"][0]
    assert tuple(urgency["enum"]) == URGENCIES
    question = packet["properties"]["smallest_unblocking_question"]["anyOf"][0]
    assert question["maxLength"] == QUESTION_MAX_CHARS
    assert set(schemas["RuledOut"]["properties"]) == {"hypothesis", "how"}


@pytest.mark.django_db(transaction=True)
def test_every_notification_the_demo_sends_has_what_its_schema_requires(client, settings, tmp_path):
    """Every delivery the six stories record (each kind of notification, an escalation opened
    by the retry policy among them) carries the fields its OpenAPI schema requires, so a
    receiver validating against the document accepts it."""
    settings.VAR_DIR = tmp_path
    demo.load()
    doc = client.get("/api/v1/openapi.json").json()
    schemas = doc["components"]["schemas"]
    seen = set()
    for delivery in Delivery.objects.all():
        ref = doc["webhooks"][delivery.type]["post"]["requestBody"]["content"]["application/json"]
        schema = schemas[ref["schema"]["$ref"].rsplit("/", 1)[-1]]
        payload = delivery.payload
        assert set(schema["required"]) <= set(payload), delivery.type
        assert payload["type"] == schema["properties"]["type"]["const"]
        missing = set(schema["properties"]["data"]["required"]) - set(payload["data"])
        assert not missing, f"{delivery.type} {payload['data']} lacks {sorted(missing)}"
        seen.add(delivery.type)
    assert {"escalation.opened", "task.reframed", "task.halted", "run.failed"} <= seen


def test_the_blast_radius_says_what_its_minutes_and_artifacts_count(client):
    radius = client.get("/api/v1/openapi.json").json()["components"]["schemas"]["BlastRadius"]

    minutes = radius["properties"]["minutes"]["description"]
    assert "to now while the run goes on" in minutes and "to the run's end" in minutes
    assert "while the claim was unchecked" in radius["properties"]["artifacts"]["description"]
