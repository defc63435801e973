"""Buffered non-gating events, sent in one signed batch to the loopback stand-in."""

import json

import pytest
from standardwebhooks.webhooks import Webhook

from bulkhead_client import BatchRefused, Bulkhead

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def results_for(seen):
    events = json.loads(seen.body)["events"]
    return (
        200,
        {},
        {
            "results": [
                {"id": e["id"], "status": 202, "body": {"event": e["id"], "type": e["type"]}}
                for e in events
            ]
        },
    )


def test_a_batch_sends_its_events_in_one_signed_request(fake, sleeps):
    bh = Bulkhead(endpoint=fake.endpoint, secret=SECRET, sleep=sleeps)
    fake.script = [results_for]
    with bh.batch() as batch:
        first = batch.add(
            "claim.posted", {"run": "r", "task": "a", "claim": {"key": "k", "statement": "s"}}
        )
        batch.add("task.finished", {"run": "r", "task": "a", "outcome": "succeeded"})
        assert fake.seen == []  # buffered until the block ends
    [seen] = fake.seen
    assert seen.path == "/hooks/v1/agents/agent-1/batches"
    body = Webhook(SECRET).verify(seen.body, seen.headers)
    assert [e["type"] for e in body["events"]] == ["claim.posted", "task.finished"]
    assert body["events"][0]["id"] == first and set(body["events"][0]) == {
        "id",
        "type",
        "timestamp",
        "data",
    }
    assert [r.status for r in batch.results] == [202, 202]


def test_a_batch_is_retried_whole_under_its_id_after_a_503(fake, sleeps):
    bh = Bulkhead(endpoint=fake.endpoint, secret=SECRET, sleep=sleeps)
    fake.script = [(503, {"Retry-After": "1"}, {"errors": []}), results_for]
    batch = bh.batch()
    batch.add("capability.changed", {"capability": "forge", "status": "up"})
    batch.flush()
    assert len(fake.seen) == 2 and fake.seen[0].body == fake.seen[1].body
    assert fake.seen[0].headers["webhook-id"] == fake.seen[1].headers["webhook-id"]


def test_it_flushes_when_full(fake, sleeps):
    bh = Bulkhead(endpoint=fake.endpoint, secret=SECRET, sleep=sleeps)
    fake.script = [results_for, results_for]
    batch = bh.batch(max_events=2)
    for i in range(3):
        batch.add("capability.changed", {"capability": f"c{i}", "status": "up"})
    assert len(fake.seen) == 1
    batch.flush()
    assert [len(json.loads(s.body)["events"]) for s in fake.seen] == [2, 1]


def test_a_refused_event_of_a_batch_raises_with_every_result(fake, sleeps):
    bh = Bulkhead(endpoint=fake.endpoint, secret=SECRET, sleep=sleeps)

    def one_refused(seen):
        events = json.loads(seen.body)["events"]
        return (200, {}, {"results": [
            {"id": events[0]["id"], "status": 202, "body": {"event": "e", "type": "task.finished"}},
            {"id": events[1]["id"], "status": 422, "body": {"errors": [{"loc": "data.task", "msg": "no task 'zz'"}]}},
        ]})  # fmt: skip

    fake.script = [one_refused]
    batch = bh.batch()
    batch.add("task.finished", {"run": "r", "task": "a", "outcome": "succeeded"})
    second = batch.add("task.finished", {"run": "r", "task": "zz", "outcome": "succeeded"})
    with pytest.raises(BatchRefused) as raised:
        batch.flush()
    assert raised.value.errors == [{"loc": f"events.{second}.data.task", "msg": "no task 'zz'"}]
    assert [r.status for r in raised.value.results] == [202, 422]


def test_a_gating_event_is_not_buffered(fake, sleeps):
    batch = Bulkhead(endpoint=fake.endpoint, secret=SECRET, sleep=sleeps).batch()
    with pytest.raises(ValueError, match="task.started is not buffered"):
        batch.add(
            "task.started",
            {"run": "r", "task": "a", "attempt": {"prompt_hash": "p", "context_hash": "c"}},
        )


def claim(n: int, size: int) -> dict:
    return {"run": "r", "task": "a", "claim": {"key": f"k{n}", "statement": "s" * size}}


def test_a_batch_larger_than_the_servers_limit_goes_in_requests_within_it(fake, sleeps):
    """Before, 300 claims of 60 KB were one 18 MB request: a 413 on every flush, nothing sent."""
    bh = Bulkhead(endpoint=fake.endpoint, secret=SECRET, sleep=sleeps)
    fake.script = [results_for] * 10
    batch = bh.batch(max_bytes=200_000)
    ids = [batch.add("claim.posted", claim(n, 60_000)) for n in range(7)]
    results = batch.flush()
    assert [len(s.body) <= 200_000 for s in fake.seen] == [True, True, True]
    sent = [e["id"] for s in fake.seen for e in json.loads(s.body)["events"]]
    assert sent == ids  # each once, in order
    assert [r.id for r in batch.results] == ids and [r.id for r in results] == ids[4:]


def test_an_event_larger_than_a_batch_is_refused_when_added(fake, sleeps):
    batch = Bulkhead(endpoint=fake.endpoint, secret=SECRET, sleep=sleeps).batch(max_bytes=10_000)
    with pytest.raises(
        ValueError, match="more than a batch of 10,000 bytes holds: send it on its own"
    ):
        batch.add("claim.posted", claim(1, 20_000))
    assert batch.waiting == [] and fake.seen == []


def test_a_block_that_raises_still_sends_what_it_recorded(fake, sleeps):
    bh = Bulkhead(endpoint=fake.endpoint, secret=SECRET, sleep=sleeps)
    fake.script = [results_for]
    with pytest.raises(RuntimeError, match="the agent crashed"), bh.batch() as batch:
        batch.add("task.finished", {"run": "r", "task": "a", "outcome": "succeeded"})
        raise RuntimeError("the agent crashed")
    [seen] = fake.seen
    assert [e["type"] for e in json.loads(seen.body)["events"]] == ["task.finished"]
