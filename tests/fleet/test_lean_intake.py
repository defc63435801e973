"""The common events cost at most 5 statements (besides the transaction's own), whatever the
run's size; the agent's keys are cached and dropped when they change."""

import pytest
from django.core.cache import cache
from django.core.cache.backends.redis import RedisCache
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext
from kombu.exceptions import OperationalError as KombuOperationalError
from psycopg.errors import DeadlockDetected

from fleet import dispatch, intake, services
from fleet.models import Capability, Event
from runs import scheduler, tasks
from runs.models import Claim, FrontierChange, Run, Task
from tests.conftest import Sender, on_postgres, task

HASHES = {"prompt_hash": "sha256:" + "a" * 64, "context_hash": "sha256:" + "b" * 64}
TRANSACTION = ("SAVEPOINT", "RELEASE SAVEPOINT", "BEGIN", "COMMIT")


def statements(sender: Sender, type: str, data: dict) -> int:
    """The statements of applying the event, up to its commit (the recompute the test client
    then runs inline belongs to a worker)."""
    with CaptureQueriesContext(connection) as queries:
        response = sender.post(type, data)
    assert response.status_code == 202, response.json()
    sql = [q["sql"] for q in queries.captured_queries]
    event = next(i for i, s in enumerate(sql) if s.startswith('INSERT INTO "fleet_event"'))
    return len([s for s in sql[: event + 1] if not s.startswith(TRANSACTION)])


@pytest.fixture(params=[10, 300])
def big(request, planner: Sender, coder: Sender) -> Sender:
    tasks = [task("a"), task("b", prerequisites=["a"])]
    tasks += [task(f"w{i}", prerequisites=[f"w{i - 1}"] if i else []) for i in range(request.param)]
    assert planner.post("run.started", {"run": "r1", "tasks": tasks}).status_code == 202
    coder.post("task.started", {"run": "r1", "task": "a", "attempt": HASHES})  # keys cached
    coder.post("task.finished", {"run": "r1", "task": "a", "outcome": "succeeded"})
    return coder


@pytest.mark.postgres
def test_the_common_events_cost_at_most_five_statements_at_any_run_size(big):
    assert on_postgres()
    start = {"run": "r1", "task": "b", "attempt": HASHES}
    assert statements(big, "task.started", start) <= 5
    claim = {"key": "k1", "statement": "`customers` has `tier`"}
    assert statements(big, "claim.posted", {"run": "r1", "task": "b", "claim": claim}) <= 4
    finish = {"run": "r1", "task": "b", "outcome": "succeeded"}
    assert statements(big, "task.finished", finish) <= 5
    # A start in a run with claims posted adds the claims it consumes, in one statement.
    assert statements(big, "task.started", {"run": "r1", "task": "w0", "attempt": HASHES}) <= 6


def test_the_response_is_written_with_the_event_row(big):
    response = big.post(
        "claim.posted", {"run": "r1", "task": "b", "claim": {"key": "k1", "statement": "x"}}
    )
    stored = Event.objects.get(pk=response.json()["event"])
    assert {"event": str(stored.pk), **stored.response} == response.json()


def test_a_new_key_verifies_and_a_revoked_one_is_refused_at_once(big):
    big.post("claim.posted", {"run": "r1", "task": "b", "claim": {"key": "k1", "statement": "x"}})
    old = big.secret
    new = services.signing_key_add(agent=big.agent)
    big.secret = new.secret
    assert (
        big.post(
            "claim.posted", {"run": "r1", "task": "b", "claim": {"key": "k2", "statement": "x"}}
        ).status_code
        == 202
    )
    key = big.agent.signing_keys.get(secret=old)
    services.signing_key_revoke(agent=big.agent, key_id=key.pk, at=key.created_at)
    big.secret = old
    refused = big.post(
        "claim.posted", {"run": "r1", "task": "b", "claim": {"key": "k3", "statement": "x"}}
    )
    assert refused.status_code == 401


def test_an_agent_made_orchestrator_acts_as_one_at_once(big, planner):
    data = {"run": "r1", "task": "b", "agent": "planner", "claim": {"key": "k1", "statement": "x"}}
    only = {"loc": "data.agent", "msg": "only an orchestrator may act as another agent"}
    assert big.post("claim.posted", data).json()["errors"] == [only]
    big.agent.is_orchestrator = True
    big.agent.save()
    assert only not in big.post("claim.posted", data).json()["errors"]


@pytest.mark.postgres
def test_a_start_past_changes_that_hold_nothing_back_stays_lean(big):
    run = Run.objects.get(key="r1")
    FrontierChange.objects.create(run=run, keys=["w3"], may_hold=False)  # not caught up yet
    assert statements(big, "task.started", {"run": "r1", "task": "b", "attempt": HASHES}) <= 5


def test_a_start_past_a_change_that_may_hold_it_asks_the_rule(big, fleet):
    """The stored frontier has w0 ready, but the forge went down since (not recomputed yet)."""
    run = Run.objects.get(key="r1")
    Task.objects.filter(run=run, key="w0").update(capabilities=["forge"], effect="none")
    Capability.objects.create(fleet=fleet, name="forge", status=Capability.Status.DOWN)
    FrontierChange.objects.create(run=run, keys=[], capability="forge")
    assert Task.objects.get(run=run, key="w0").ready
    refused = big.post("task.started", {"run": "r1", "task": "w0", "attempt": HASHES})
    assert refused.status_code == 409
    assert {"loc": "blockers", "msg": "capability:forge"} in refused.json()["errors"]


def test_one_recompute_catches_up_with_every_pending_change(big):
    run = Run.objects.get(key="r1")
    FrontierChange.objects.create(run=run, keys=["w0"], may_hold=False)
    FrontierChange.objects.create(run=run, keys=["w1"])
    scheduler.recompute(run.pk, [])
    assert not FrontierChange.objects.filter(run=run).exists()
    with CaptureQueriesContext(connection) as queries:
        assert scheduler.recompute(run.pk, []) == {}
    assert len(queries.captured_queries) <= 4  # its lock and the look for pending changes


@pytest.mark.postgres
def test_a_packet_opens_its_escalation_in_sixteen_statements(big):
    """A packet's row, the escalation, its hold and the task's state are four writes of their own;
    looking for a waiting escalation that asks the same question and routing the new one to a
    reviewer cost eight more: it stays above the other events' five, whatever the run's size."""
    packet = {
        "task": "b",
        "tried": ["re-ran the migration"],
        "ruled_out": [],
        "evidence": [
            {"kind": "query_result", "source": "SELECT 1", "payload_hash": "sha256:" + "ab" * 32}
        ],
        "smallest_unblocking_question": "Which field decides the tier?",
    }
    big.post("task.started", {"run": "r1", "task": "b", "attempt": HASHES})
    assert statements(big, "packet.submitted", {"run": "r1", "task": "b", "packet": packet}) <= 16


def test_a_busy_runs_events_share_one_recompute_until_it_starts(big, monkeypatch):
    """A recompute reads every change pending when it starts: the events committed before
    that send none of their own; the first after it does."""
    sent: list[dict] = []
    monkeypatch.setattr(tasks.recompute, "delay", lambda *args, **kwargs: sent.append(kwargs))
    for key in ("k1", "k2", "k3"):
        claim = {"key": key, "statement": "x"}
        assert (
            big.post("claim.posted", {"run": "r1", "task": "b", "claim": claim}).status_code == 202
        )
    assert len(sent) == 1
    run = Run.objects.get(key="r1")
    tasks.recompute(run.pk, [], on_its_way=sent[0]["on_its_way"])  # the worker takes it
    assert not FrontierChange.objects.filter(run=run).exists()
    claim = {"key": "k4", "statement": "x"}
    assert big.post("claim.posted", {"run": "r1", "task": "b", "claim": claim}).status_code == 202
    assert len(sent) == 2


def test_with_the_cache_unreachable_every_event_sends_its_recompute(big, monkeypatch):
    sent: list[dict] = []
    monkeypatch.setattr(tasks.recompute, "delay", lambda *args, **kwargs: sent.append(kwargs))

    def unreachable(*args, **kwargs):
        raise ConnectionError("cache down")

    monkeypatch.setattr(cache, "add", unreachable)
    for key in ("k1", "k2"):
        claim = {"key": key, "statement": "x"}
        assert (
            big.post("claim.posted", {"run": "r1", "task": "b", "claim": claim}).status_code == 202
        )
    assert len(sent) == 2


def test_the_rate_count_lapses_with_its_window():
    assert [intake.counted("rate:test", timeout=7) for _ in range(3)] == [1, 2, 3]
    if isinstance(cache, RedisCache):  # one round trip: INCR, then EXPIRE only when new
        name = cache.make_and_validate_key("rate:test")
        assert 0 < cache._cache.get_client(name).ttl(name) <= 7
    assert cache.get("rate:test") == 3


def deadlocked(times: int, handler):
    """The handler, chosen `times` times by the database to break a deadlock before it runs."""
    calls = [0]

    def handle(context, data):
        calls[0] += 1
        if calls[0] <= times:
            raise OperationalError("deadlock detected") from DeadlockDetected("deadlock detected")
        return handler(context, data)

    return handle


def test_an_event_rolled_back_to_break_a_deadlock_is_applied_again(big, monkeypatch):
    monkeypatch.setitem(dispatch.HANDLERS, "claim.posted", deadlocked(2, dispatch.claim_posted))
    data = {"run": "r1", "task": "b", "claim": {"key": "k1", "statement": "x"}}
    response = big.post("claim.posted", data)
    assert response.status_code == 202, response.json()
    assert Claim.objects.filter(key="k1").count() == 1
    assert Event.objects.filter(type="claim.posted").count() == 1


def test_an_event_deadlocked_again_and_again_is_503_with_retry_after(big, monkeypatch):
    monkeypatch.setitem(dispatch.HANDLERS, "claim.posted", deadlocked(3, dispatch.claim_posted))
    data = {"run": "r1", "task": "b", "claim": {"key": "k1", "statement": "x"}}
    response = big.post("claim.posted", data)
    assert response.status_code == 503
    assert response["Retry-After"]
    assert not Claim.objects.filter(key="k1").exists()


def test_a_recompute_the_broker_refused_is_sent_again_by_the_next_event(big, monkeypatch):
    sent: list[dict] = []

    def broker_down(*args, **kwargs):
        raise KombuOperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(tasks.recompute, "delay", broker_down)
    claim = {"key": "k1", "statement": "x"}
    assert big.post("claim.posted", {"run": "r1", "task": "b", "claim": claim}).status_code == 202
    monkeypatch.setattr(tasks.recompute, "delay", lambda *args, **kwargs: sent.append(kwargs))
    claim = {"key": "k2", "statement": "x"}
    assert big.post("claim.posted", {"run": "r1", "task": "b", "claim": claim}).status_code == 202
    assert len(sent) == 1
