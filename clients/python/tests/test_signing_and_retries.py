"""Signing, idempotent retries under one webhook-id, and the errors a refusal raises."""

import json

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from bulkhead_client import Blocked, Bulkhead, Refused, RetriesExhausted, RetryPolicy, Unauthorized
from bulkhead_client.events import Task

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # as the fake's


def client(fake, sleeps, **kwargs):
    return Bulkhead(endpoint=fake.endpoint, secret=SECRET, token="bhk_t", sleep=sleeps, **kwargs)


def test_it_signs_the_body_bytes_it_sends(fake, sleeps):
    bh = client(fake, sleeps)
    bh.send("run.started", {"run": "r1", "tasks": [{"key": "a", "agent": "planner"}]})
    [seen] = fake.seen
    assert seen.path == "/hooks/v1/agents/agent-1/events"
    envelope = Webhook(SECRET).verify(seen.body, seen.headers)
    assert envelope["type"] == "run.started"
    assert envelope["data"]["tasks"] == [
        {"key": "a", "title": "", "agent": "planner", "prerequisites": [], "capabilities": [],
         "reads_state_of": [], "effect": "none", "dependency_confidence": "declared",
         "weight": 1, "checks": []}
    ]  # fmt: skip
    assert "consumes" not in envelope["data"]["tasks"][0]  # absent: its prerequisites' claims
    assert seen.headers["content-type"] == "application/json"


def test_consumes_declared_empty_is_sent_as_an_empty_list(fake, sleeps):
    client(fake, sleeps).send(
        "run.started", {"run": "r1", "tasks": [Task(key="a", agent="p", consumes=[])]}
    )
    assert json.loads(fake.seen[0].body)["data"]["tasks"][0]["consumes"] == []


def test_a_429_and_a_503_are_retried_with_the_same_id_body_and_timestamp(fake, sleeps):
    fake.script = [
        (429, {"Retry-After": "7"}, {"errors": [{"loc": "agent", "msg": "too many requests"}]}),
        (503, {"Retry-After": "2"}, {"errors": [{"loc": "database", "msg": "unavailable"}]}),
        (202, {}, {"event": "e1", "type": "task.finished", "state": "succeeded"}),
    ]
    accepted = client(fake, sleeps).send(
        "task.finished", {"run": "r1", "task": "a", "outcome": "succeeded"}
    )
    assert accepted.event == "e1" and accepted.get("state") == "succeeded"
    assert sleeps == [7.0, 2.0]  # what the server asked for
    ids = {(s.headers["webhook-id"], s.headers["webhook-timestamp"], s.body) for s in fake.seen}
    assert len(fake.seen) == 3 and len(ids) == 1


def test_without_retry_after_it_backs_off_exponentially_within_the_bound(fake, sleeps):
    fake.script = [(503, {}, {"errors": []})] * 10
    bh = client(fake, sleeps, retry=RetryPolicy(attempts=4, base_delay=1.0, max_delay=3.0))
    with pytest.raises(RetriesExhausted) as raised:
        bh.send("capability.changed", {"capability": "forge", "status": "up"})
    assert raised.value.attempts == 4 and raised.value.last_status == 503
    assert len(fake.seen) == 4 and len(sleeps) == 3
    assert 0.5 <= sleeps[0] <= 1.0 and 1.0 <= sleeps[1] <= 2.0 and 1.5 <= sleeps[2] <= 3.0
    assert "same webhook-id" in str(raised.value)
    assert raised.value.event is not None and raised.value.event.type == "capability.changed"


def test_after_retries_exhausted_the_event_is_sent_again_as_it_was_first(fake, sleeps):
    """The error carries the signed event: `deliver` sends the same id and body, which the
    server applies once (before, only the id was in the message, and sending the same data
    again made a new body: a 409 under that id)."""
    fake.script = [(503, {}, {"errors": []})] * 2
    bh = client(fake, sleeps, retry=RetryPolicy(attempts=2))
    with pytest.raises(RetriesExhausted) as raised:
        bh.send("task.finished", {"run": "r1", "task": "a", "outcome": "succeeded"})
    event = raised.value.event
    assert event is not None and "deliver(error.event)" in str(raised.value)
    accepted = bh.deliver(event)
    assert accepted.event == "e"
    sent = {(s.headers["webhook-id"], s.body) for s in fake.seen}
    assert len(fake.seen) == 3 and sent == {(event.webhook_id, event.body)}


def test_a_read_that_gets_no_answer_says_to_try_again(fake, sleeps):
    fake.script = [(503, {}, {"errors": []})] * 2
    bh = client(fake, sleeps, retry=RetryPolicy(attempts=2))
    with pytest.raises(RetriesExhausted, match="try again later") as raised:
        bh.frontier("r1")
    assert raised.value.event is None


def test_a_retry_after_past_the_deadline_gives_up_rather_than_waiting_less(fake, sleeps):
    fake.script = [(429, {"Retry-After": "600"}, {"errors": []})]
    with pytest.raises(RetriesExhausted, match="deadline"):
        client(fake, sleeps).send("capability.changed", {"capability": "forge", "status": "up"})
    assert sleeps == []


def test_a_connection_error_is_retried_under_the_same_id(fake, sleeps):
    tries = []

    def flaky(request):
        tries.append(request.headers["webhook-id"])
        if len(tries) == 1:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(202, json={"event": "e", "type": "run.started"})

    bh = Bulkhead(
        endpoint="http://bulkhead.test/hooks/v1/agents/a1/events",
        secret=SECRET,
        http=httpx.Client(transport=httpx.MockTransport(flaky)),
        sleep=sleeps,
    )
    bh.send("run.started", {"run": "r", "tasks": [{"key": "a", "agent": "p"}]})
    assert len(tries) == 2 and tries[0] == tries[1] and len(sleeps) == 1


def test_a_4xx_raises_with_the_servers_errors(fake, sleeps):
    errors = [{"loc": "data.tasks.0.agent", "msg": "no agent 'nobody' in this fleet"}]
    fake.script = [(422, {}, {"errors": errors})]
    with pytest.raises(Refused) as raised:
        client(fake, sleeps).send(
            "run.started", {"run": "r", "tasks": [{"key": "a", "agent": "nobody"}]}
        )
    assert raised.value.status == 422 and raised.value.errors == errors
    assert raised.value.messages("data.tasks.0.agent") == ["no agent 'nobody' in this fleet"]
    assert "data.tasks.0.agent: no agent 'nobody'" in str(raised.value)
    assert len(fake.seen) == 1  # a refusal is not retried


def test_a_401_is_unauthorized(fake, sleeps):
    fake.script = [
        (401, {}, {"errors": [{"loc": "webhook-signature", "msg": "authentication failed"}]})
    ]
    with pytest.raises(Unauthorized):
        client(fake, sleeps).send("capability.changed", {"capability": "forge", "status": "up"})


def test_a_409_with_blockers_is_blocked_with_the_typed_blockers(fake, sleeps):
    errors = [
        {"loc": "blockers", "msg": "claim:plan.tier"},
        {"loc": "blockers", "msg": "prerequisite:plan"},
        {"loc": "claims.plan.tier", "msg": "plan.tier is refuted: the column is not there"},
    ]
    fake.script = [(409, {}, {"errors": errors})]
    run = client(fake, sleeps).run("r1")
    with pytest.raises(Blocked) as raised, run.task("code", prompt_hash="p", context_hash="c"):
        pytest.fail("the block does not run when the task may not start")
    assert raised.value.blockers == ["claim:plan.tier", "prerequisite:plan"]
    assert raised.value.reasons == [errors[2]]
    assert len(fake.seen) == 1  # no task.finished for an attempt that never started


def test_a_409_for_a_reused_webhook_id_is_a_plain_refusal(fake, sleeps):
    fake.script = [
        (409, {}, {"errors": [{"loc": "webhook-id", "msg": "already used for a different body"}]})
    ]
    with pytest.raises(Refused) as raised:
        client(fake, sleeps).send(
            "capability.changed", {"capability": "f", "status": "up"}, webhook_id="x"
        )
    assert not isinstance(raised.value, Blocked)


def test_a_bad_event_is_refused_before_it_is_sent(fake, sleeps):
    bh = client(fake, sleeps)
    with pytest.raises(ValueError, match="not an event type"):
        bh.send("task.exploded", {})
    with pytest.raises(ValueError, match="outcome"):
        bh.send("task.finished", {"run": "r", "task": "a", "outcome": "maybe"})
    assert fake.seen == []


def test_the_endpoint_names_the_agent_and_the_base_url():
    bh = Bulkhead(
        endpoint="https://bh.example.com/prefix/hooks/v1/agents/1234/events", secret=SECRET
    )
    assert (bh.agent_id, bh.base_url) == ("1234", "https://bh.example.com/prefix")
    assert bh.batch_endpoint == "https://bh.example.com/prefix/hooks/v1/agents/1234/batches"
    with pytest.raises(ValueError, match="not an agent's endpoint"):
        Bulkhead(endpoint="https://bh.example.com/api/v1/runs/x", secret=SECRET)


def test_reads_send_the_token_and_retry_a_503(fake, sleeps):
    fake.script = [
        (503, {"Retry-After": "1"}, {"errors": []}),
        (
            200,
            {},
            {
                "policy": "scoped",
                "ready": ["a"],
                "deferred": [{"task": "b", "blockers": ["prerequisite:a"]}],
            },
        ),
    ]
    frontier = client(fake, sleeps).run("r 1").frontier()
    assert frontier.ready == ["a"] and frontier.deferred[0].blockers == ["prerequisite:a"]
    assert fake.seen[-1].path == "/api/v1/runs/r%201/frontier"
    assert fake.seen[-1].headers["authorization"] == "Bearer bhk_t"


def test_a_401_says_when_this_machines_clock_is_minutes_off_the_servers(fake, sleeps):
    """A skewed clock and a wrong secret get the same 401 (the server tells nothing apart); the
    server's Date header lets the client say which it likely is."""
    from email.utils import formatdate

    refusal = {"errors": [{"loc": "webhook-signature", "msg": "authentication failed"}]}
    bh = client(fake, sleeps)
    server_now = bh.clock() - 600  # this machine is 10 minutes ahead
    fake.script = [(401, {"Date": formatdate(server_now, usegmt=True)}, refusal)]
    with pytest.raises(Unauthorized) as skewed:
        bh.send("capability.changed", {"capability": "forge", "status": "up"})
    assert 595 <= skewed.value.clock_skew <= 605
    assert "clock is +60" in skewed.value.__notes__[0]
    fake.script = [(401, {"Date": formatdate(bh.clock(), usegmt=True)}, refusal)]
    with pytest.raises(Unauthorized) as wrong_secret:
        bh.send("capability.changed", {"capability": "forge", "status": "up"})
    assert abs(wrong_secret.value.clock_skew) < 5
    assert not getattr(wrong_secret.value, "__notes__", [])
