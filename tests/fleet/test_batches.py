"""Batches: one signed request of up to 500 events, each applied once on its own id."""

import json
import uuid
from typing import Any

import pytest
from django.db import connection
from django.test import TestCase
from django.test.utils import CaptureQueriesContext

from fleet.models import Event
from runs.models import Attempt, Blocker, Claim, FrontierChange
from tests.conftest import Sender, task, wsgi_headers

HASHES = {"prompt_hash": "sha256:" + "a" * 64, "context_hash": "sha256:" + "b" * 64}


def batch_path(sender: Sender) -> str:
    return f"/hooks/v1/agents/{sender.agent.pk}/batches"


def post_batch(sender: Sender, events: list[dict[str, Any]] | Any, **headers: Any) -> Any:
    body = json.dumps({"events": events} if isinstance(events, list) else events).encode()
    return post_batch_raw(sender, body, **headers)


def post_batch_raw(sender: Sender, body: bytes, *, secret: str | None = None) -> Any:
    signed = sender.headers(body, secret=secret)
    with TestCase.captureOnCommitCallbacks(execute=True):
        return sender.client.generic(
            "POST",
            batch_path(sender),
            body,
            content_type="application/json",
            **wsgi_headers(signed),
        )


def event(type: str, data: dict[str, Any], id: str | None = None) -> dict[str, Any]:
    return {
        "id": id or f"evt_{uuid.uuid4().hex}",
        "type": type,
        "timestamp": "2026-12-02T10:00:00Z",
        "data": data,
    }


def claim(key: str, task_key: str = "a") -> dict[str, Any]:
    return event(
        "claim.posted",
        {"run": "r1", "task": task_key, "claim": {"key": key, "statement": f"`{key}` holds"}},
    )


@pytest.fixture
def started(planner: Sender, coder: Sender) -> Sender:
    tasks = [task("a"), task("b", prerequisites=["a"]), *[task(f"w{i}") for i in range(5)]]
    assert planner.post("run.started", {"run": "r1", "tasks": tasks}).status_code == 202
    response = coder.post("task.started", {"run": "r1", "task": "a", "attempt": HASHES})
    assert response.status_code == 202, response.json()
    return coder


def test_it_applies_each_event_in_order_with_its_own_result(started):
    events = [
        claim("k1"),
        claim("k2"),
        event("task.finished", {"run": "r1", "task": "a", "outcome": "succeeded"}),
    ]
    response = post_batch(started, events)
    assert response.status_code == 200, response.json()
    results = response.json()["results"]
    assert [(r["id"], r["status"]) for r in results] == [(e["id"], 202) for e in events]
    assert results[0]["body"]["claim"] == "k1" and results[2]["body"]["state"] == "succeeded"
    assert {e.webhook_id for e in Event.objects.filter(agent=started.agent)} >= {
        e["id"] for e in events
    }
    assert results[1]["body"]["event"] == str(Event.objects.get(webhook_id=events[1]["id"]).pk)
    # The run's frontier caught up once: b waits on a's unverified claims, not on a.
    blockers = Blocker.objects.filter(task__key="b", cleared_at__isnull=True)
    assert sorted(blockers.values_list("code", flat=True)) == ["claim:k1", "claim:k2"]
    assert not FrontierChange.objects.exists()


def test_a_bad_event_among_good_ones_is_refused_alone(started):
    events = [
        claim("k1"),
        claim("k2", task_key="nope"),
        event("claim.posted", {"run": "r1"}),
        claim("k3"),
    ]
    results = post_batch(started, events).json()["results"]
    assert [r["status"] for r in results] == [202, 422, 422, 202]
    assert results[1]["body"] == {
        "errors": [{"loc": "data.task", "msg": "unknown task 'nope' in run 'r1'"}]
    }
    assert {e["loc"] for e in results[2]["body"]["errors"]} >= {"data.task", "data.claim"}
    assert sorted(Claim.objects.values_list("key", flat=True)) == ["k1", "k3"]


def test_an_offset_postgresql_cannot_store_is_one_events_matter_not_the_batchs(started):
    far = {**claim("k2"), "timestamp": "2026-12-02T12:00:00+16:00"}
    beyond = {**claim("k3"), "timestamp": "9999-12-31T23:59:59.999999-23:59"}
    results = post_batch(started, [claim("k1"), far, beyond, claim("k4")]).json()["results"]
    assert [r["status"] for r in results] == [202, 202, 422, 202]
    assert "outside the years 1 to 9999" in results[2]["body"]["errors"][0]["msg"]
    assert results[2]["body"]["errors"][0]["loc"].endswith("timestamp")
    assert sorted(Claim.objects.values_list("key", flat=True)) == ["k1", "k2", "k4"]


def test_a_value_the_database_will_not_store_is_that_events_422_alone(started, monkeypatch):
    from django.db import DataError

    from fleet import dispatch

    def refused(context, data):
        raise DataError("numeric field overflow")

    monkeypatch.setitem(dispatch.HANDLERS, "capability.changed", refused)
    change = {"capability": "forge", "status": "down", "reason": "r"}
    events = [claim("k1"), event("capability.changed", change), claim("k2")]
    results = post_batch(started, events).json()["results"]
    assert [r["status"] for r in results] == [202, 422, 202]
    assert results[1]["body"]["errors"][0]["msg"].endswith("numeric field overflow")
    assert sorted(Claim.objects.values_list("key", flat=True)) == ["k1", "k2"]
    assert not Event.objects.filter(webhook_id=events[1]["id"]).exists()


def test_an_event_refused_after_writing_leaves_nothing_behind(started):
    # The second finish of the same attempt is a 409 from inside the service.
    finish = {"run": "r1", "task": "a", "outcome": "succeeded"}
    results = post_batch(
        started, [event("task.finished", finish), event("task.finished", finish), claim("k1")]
    ).json()["results"]
    assert [r["status"] for r in results] == [202, 409, 202]
    assert Attempt.objects.get(task__key="a").outcome == "succeeded"


def test_a_replayed_id_gets_its_first_result_and_another_body_a_409(started):
    first = claim("k1", task_key="a")
    response = post_batch(started, [first])
    body = response.json()["results"][0]
    again = post_batch(
        started,
        [first, {**first, "data": {**first["data"], "claim": {"key": "k9", "statement": "x"}}}],
    )
    results = again.json()["results"]
    assert results[0] == body
    assert results[1]["status"] == 409
    assert results[1]["body"] == {
        "errors": [{"loc": "webhook-id", "msg": "already used for a different body"}]
    }
    assert Claim.objects.count() == 1


def test_duplicate_ids_in_one_batch_are_applied_once(started):
    first = claim("k1")
    other = {**claim("k2"), "id": first["id"]}
    results = post_batch(started, [first, first, other]).json()["results"]
    assert [r["status"] for r in results] == [202, 202, 409]
    assert results[0] == results[1]
    assert Claim.objects.count() == 1
    assert Event.objects.filter(webhook_id=first["id"]).count() == 1


def test_an_id_of_a_single_event_is_shared_with_batches(started):
    single = started.post(
        "claim.posted",
        {"run": "r1", "task": "a", "claim": {"key": "k1", "statement": "x"}},
        webhook_id="msg_one",
    )
    assert single.status_code == 202
    results = post_batch(started, [{**claim("k2"), "id": "msg_one"}]).json()["results"]
    assert results[0]["status"] == 409


def test_the_same_event_as_a_single_events_id_gets_its_first_result_either_way(started):
    # The single post is spaced JSON, the batch compares canonical JSON: the same event all the same.
    data = {"run": "r1", "task": "a", "claim": {"key": "k1", "statement": "x"}}
    single = started.post("claim.posted", data, webhook_id="msg_one")
    assert single.status_code == 202
    again = {"id": "msg_one", "type": "claim.posted", "timestamp": "2026-12-02T10:00:00Z"}
    results = post_batch(started, [{**again, "data": data}]).json()["results"]
    assert results == [{"id": "msg_one", "status": 202, "body": single.json()}]

    batched = claim("k2")
    first = post_batch(started, [batched]).json()["results"][0]
    envelope = {name: value for name, value in batched.items() if name != "id"}
    body = json.dumps(envelope, indent=2).encode()
    alone = started.post_raw(body, started.headers(body, webhook_id=batched["id"]))
    assert (alone.status_code, alone.json()) == (202, first["body"])
    assert Event.objects.filter(webhook_id__in=["msg_one", batched["id"]]).count() == 2


def test_501_events_are_413_naming_the_limit(started):
    response = post_batch(started, [claim(f"k{i}") for i in range(501)])
    assert response.status_code == 413
    assert response.json() == {
        "errors": [
            {
                "loc": "events",
                "msg": "holds 501 events; at most 500 in one batch: send the rest in another",
            }
        ]
    }
    assert not Claim.objects.exists()


def test_500_events_are_applied(started):
    response = post_batch(started, [claim(f"k{i}") for i in range(500)])
    assert response.status_code == 200
    assert [r["status"] for r in response.json()["results"]] == [202] * 500
    assert Claim.objects.count() == 500


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ([], [{"loc": "body", "msg": 'must be a JSON object {"events": [...]}'}]),
        ({}, [{"loc": "events", "msg": "must be a list of events"}]),
        ({"events": {}}, [{"loc": "events", "msg": "must be a list of events"}]),
        ({"events": []}, [{"loc": "events", "msg": "is empty; send at least one event"}]),
        (
            {"events": [], "extra": 1},
            [
                {"loc": "extra", "msg": "unknown field; a batch holds only events"},
                {"loc": "events", "msg": "is empty; send at least one event"},
            ],
        ),
        (
            {"events": [1, {"type": "claim.posted"}, {"id": 7}, {"id": ""}, {"id": "x" * 201}]},
            [
                {"loc": "events.0", "msg": "must be an object with id, type, timestamp and data"},
                {
                    "loc": "events.1.id",
                    "msg": "is missing: each event has its own id, its idempotency key",
                },
                {"loc": "events.2.id", "msg": "must be a string"},
                {"loc": "events.3.id", "msg": "is empty"},
                {"loc": "events.4.id", "msg": "is 201 characters; at most 200"},
            ],
        ),
    ],
)
def test_a_bad_envelope_is_422_naming_each_problem_and_applies_nothing(started, body, errors):
    response = post_batch_raw(started, json.dumps(body).encode())
    assert response.status_code == 422
    assert response.json() == {"errors": errors}
    assert not Claim.objects.exists()


def test_an_id_with_a_control_character_or_a_lone_surrogate_is_named(started):
    good = event(
        "claim.posted", {"run": "r1", "task": "a", "claim": {"key": "k", "statement": "s"}}
    )
    bad = [{**good, "id": "y\ud800"}, {**good, "id": "x\u0085"}, {**good, "id": "z\x7f"}]
    response = post_batch(started, [good, *bad])
    assert response.status_code == 422
    assert response.json() == {
        "errors": [
            {
                "loc": "events.1.id",
                "msg": "contains an unpaired surrogate (\\ud800-\\udfff), which is not valid Unicode",
            },
            {"loc": "events.2.id", "msg": "contains a control character"},
            {"loc": "events.3.id", "msg": "contains a control character"},
        ]
    }
    assert not Claim.objects.exists()


def test_an_event_larger_than_one_posted_alone_may_be_is_413_alone(started, settings):
    settings.WEBHOOK_MAX_BODY_BYTES = 1_000
    small = event(
        "claim.posted", {"run": "r1", "task": "a", "claim": {"key": "k1", "statement": "s"}}
    )
    large = event("claim.posted", {"run": "r1", "task": "a",
                                   "claim": {"key": "k2", "statement": "s" * 1_000}})  # fmt: skip
    response = post_batch(started, [small, large])
    assert response.status_code == 200
    assert [(r["status"], r["body"]) for r in response.json()["results"]][1] == (
        413,
        {"errors": [{"loc": "body", "msg": "larger than the limit of 1000 bytes"}]},
    )
    assert list(Claim.objects.values_list("key", flat=True)) == ["k1"]


def test_an_id_sent_twice_in_one_event_is_named(started):
    body = b'{"events": [{"id": "a1", "id": "a2", "type": "claim.posted", "timestamp": "2026-12-02T10:00:00Z", "data": {}}]}'
    response = post_batch_raw(started, body)
    assert response.status_code == 422
    assert response.json() == {
        "errors": [{"loc": "events.0.id", "msg": "sent more than once in one object"}]
    }


def test_a_field_sent_twice_inside_an_event_is_that_events_error(started):
    one = json.dumps(claim("k1"))
    twice = '{"id": "t2", "type": "claim.posted", "type": "claim.posted", "timestamp": "2026-12-02T10:00:00Z", "data": {"run": "r1", "task": "a", "claim": {"key": "k2", "statement": "x"}}}'
    response = post_batch_raw(started, f'{{"events": [{one}, {twice}]}}'.encode())
    results = response.json()["results"]
    assert [r["status"] for r in results] == [202, 422]
    assert {"loc": "type", "msg": "sent more than once in one object"} in results[1]["body"][
        "errors"
    ]


def test_a_batch_that_is_not_json_is_400(started):
    response = post_batch_raw(started, b'{"events": [')
    assert response.status_code == 400
    assert response.json()["errors"][0]["loc"] == "body"


def test_an_unsigned_or_wrongly_signed_batch_is_401(started, client):
    body = json.dumps({"events": [claim("k1")]}).encode()
    response = client.generic("POST", batch_path(started), body, content_type="application/json")
    assert response.status_code == 401
    assert post_batch_raw(started, body, secret="whsec_" + "B" * 43 + "=").status_code == 401
    assert not Claim.objects.exists()


def test_a_get_is_405_naming_post(started, client):
    response = client.get(batch_path(started))
    assert response.status_code == 405
    assert response["Allow"] == "POST"


def test_non_gating_events_cost_a_few_statements_each(started):
    """The batch's inserts are shared: 100 claims cost well under 5 statements each."""
    events = [claim(f"k{i}") for i in range(100)]
    with CaptureQueriesContext(connection) as queries:
        response = post_batch(started, events)
    assert [r["status"] for r in response.json()["results"]] == [202] * 100
    applied = [q for q in queries.captured_queries if "SAVEPOINT" not in q["sql"]]
    # Outside the batch's transaction: the recompute the test runs at commit.
    assert len(applied) <= 100 * 2 + 30, len(applied)
    print("statements for 100 claims in one batch:", len(applied))
