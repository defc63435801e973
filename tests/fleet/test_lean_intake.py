"""The common events cost at most 5 statements (besides the transaction's own), whatever the
run's size; the agent's keys are cached and dropped when they change."""

import os
import uuid
from datetime import timedelta

import pytest
from django.core.cache import cache, caches
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext
from kombu.exceptions import OperationalError as KombuOperationalError
from psycopg.errors import DeadlockDetected
from redis import Redis
from redis.client import Pipeline

from escalations.models import Assignment, Escalation, JoinedTask, Message
from escalations.services import messages
from fleet import dispatch, intake, services
from fleet.models import Capability, Delivery, Event
from runs import scheduler, tasks
from runs.models import Claim, ClaimUse, FrontierChange, Hold, Run, Task
from tests.conftest import REFUSED_CALLBACK, Sender, on_postgres, task
from tests.escalations import routed
from tests.escalations.desk import member

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


def lean(count: int) -> bool:
    """At most 5 statements on PostgreSQL; the embedded SQLite writes the same rows one by one."""
    return count <= 5 or not on_postgres()


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
    # A start in a run with claims posted writes the claims it consumes with the task's row.
    assert statements(big, "task.started", {"run": "r1", "task": "w0", "attempt": HASHES}) <= 5


def test_a_start_that_consumes_claims_writes_them_with_its_row(big):
    w0 = {"run": "r1", "task": "w0"}
    big.post("task.started", {**w0, "attempt": HASHES})
    for key in ("k1", "k2"):
        big.post(
            "claim.posted", {**w0, "claim": {"key": key, "statement": "x", "load_bearing": False}}
        )
    big.post("task.finished", {**w0, "outcome": "succeeded"})
    b = {"run": "r1", "task": "b"}  # nothing depends on b: its claim is not load-bearing
    big.post("task.started", {**b, "attempt": HASHES})
    big.post("claim.posted", {**b, "claim": {"key": "kb", "statement": "x", "load_bearing": False}})
    Claim.objects.update(status=Claim.Status.VERIFIED)  # as their checks would have it
    run = Run.objects.get(key="r1")
    FrontierChange.objects.create(run=run, keys=None)
    scheduler.recompute(run.pk, [])  # the stored frontier has w1 ready
    assert Task.objects.get(run=run, key="w1").ready
    assert lean(statements(big, "task.started", {"run": "r1", "task": "w1", "attempt": HASHES}))
    used = ClaimUse.objects.filter(task__key="w1").values_list("claim__key", flat=True)
    assert sorted(used) == ["k1", "k2"]
    big.post("task.finished", {"run": "r1", "task": "w1", "outcome": "succeeded"})
    # Naming a claim on starting asks the rule whether the task may start (the start gate);
    # the write raises the claim to load-bearing with the uses.
    named = {"run": "r1", "task": "w2", "attempt": HASHES, "consumes": ["kb"]}
    # The gate reads the run's facts in one statement: six in all, whatever the run's size.
    assert statements(big, "task.started", named) <= 6 or not on_postgres()
    kb = Claim.objects.get(key="kb")
    assert kb.load_bearing and kb.raised_by == "named by w2 on task.started"
    used = ClaimUse.objects.filter(task__key="w2").values_list("claim__key", flat=True)
    assert sorted(used) == ["k1", "k2", "kb"]


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


def packet_of(key: str, question: str = "Which field decides the tier?", **more: object) -> dict:
    return {
        "task": key,
        "tried": ["re-ran the migration"],
        "ruled_out": [],
        "evidence": [
            {"kind": "query_result", "source": "SELECT 1", "payload_hash": "sha256:" + "ab" * 32}
        ],
        "smallest_unblocking_question": question,
        **more,
    }


def stop(sender: Sender, key: str, question: str, **more: object) -> dict:
    """The task starts (once its prerequisites let it, or not) and stops with a packet."""
    sender.post("task.started", {"run": "r1", "task": key, "attempt": HASHES})
    response = sender.post(
        "packet.submitted", {"run": "r1", "task": key, "packet": packet_of(key, question, **more)}
    )
    assert response.status_code == 202, response.json()
    return response.json()


def test_a_packet_opens_its_escalation_in_five_statements(big):
    """The packet's row, the escalation (routed as it is written), its hold, the task's state
    and the run's frontier change go in one statement, after the one that reads the task with
    what the packet needs (a waiting escalation that asks the same, the task's own), whatever
    the run's size. The fleet's routing is cached from its first escalation."""
    stop(big, "w5", "Is the warehouse up?")  # the fleet's routing configuration is cached
    big.post("task.started", {"run": "r1", "task": "b", "attempt": HASHES})
    data = {"run": "r1", "task": "b", "packet": packet_of("b")}
    assert lean(statements(big, "packet.submitted", data))
    escalation = Escalation.objects.get(task__key="b")
    assert escalation.status == Escalation.Status.OPEN and escalation.packet.question_key
    assert escalation.attempt_number == 1 and escalation.reason
    assert Hold.objects.filter(task__key="b", code=f"escalation:{escalation.pk}").exists()
    assert Task.objects.get(key="b").state == Task.State.ESCALATED
    assert escalation.packet.checks_pending is False  # re-checked after commit (inline here)


@pytest.mark.parametrize("same", ["question", "dedup_key"])
def test_a_packet_that_joins_a_waiting_escalation_stays_lean(big, same):
    first = stop(big, "w5", "Which field decides the tier?", dedup_key="tier-source")
    question = "which field decides  the tier ?" if same == "question" else "Where is the tier?"
    data = {
        "run": "r1",
        "task": "b",
        "packet": packet_of(
            "b", question, **({"dedup_key": "tier-source"} if same != "question" else {})
        ),
    }
    big.post("task.started", {"run": "r1", "task": "b", "attempt": HASHES})
    assert lean(statements(big, "packet.submitted", data))
    joined = JoinedTask.objects.get(task__key="b", left_at__isnull=True)
    assert joined.escalation_id == first["escalation"] and joined.packet is not None
    assert Escalation.objects.filter(task__key="b").count() == 0
    assert Hold.objects.filter(
        task__key="b", code=f"escalation:{first['escalation']}", lifted_at__isnull=True
    ).exists()
    assert Task.objects.get(key="b").state == Task.State.ESCALATED


def test_a_packet_routed_to_a_pool_with_a_due_time_stays_lean(big, fleet):
    """The rule, the pool's name, the due time and the fleet's channels are cached; the pool's
    turn is one statement, the messages one more, and the callback's notification goes in with
    the escalation: six in all with the question's turn (`joining.ask_in_turn`), one over the
    other events' five."""
    for name in ("alice", "bob"):
        user = member(name, fleet)
        user.email = f"{name}@example.com"
        user.save()
    routed.pool(fleet, "desk", "alice", "bob")
    routed.route(fleet, "desk", agent_role="coding")
    routed.due(fleet, 60)
    messages.channel_add(kind="email", target="desk@example.com", fleet=fleet)
    fleet.callback_url = REFUSED_CALLBACK
    fleet.save()
    stop(big, "w5", "Is the warehouse up?")  # alice's turn; the routing is cached
    big.post("task.started", {"run": "r1", "task": "b", "attempt": HASHES})
    data = {"run": "r1", "task": "b", "packet": packet_of("b", urgency="high")}
    assert lean(statements(big, "packet.submitted", data) - 1)
    escalation = Escalation.objects.select_related("assignee", "pool").get(task__key="b")
    assert escalation.assignee.username == "bob" and escalation.pool.name == "desk"
    assert escalation.last_tier == 2 and escalation.urgency == "high"
    assert escalation.due_at == escalation.opened_at + timedelta(minutes=60)
    assert escalation.next_step_at == escalation.opened_at + timedelta(minutes=30)
    note = Assignment.objects.get(escalation=escalation).note
    assert note == (
        "Routed to pool desk (matched agent role coding); assigned to its least recently "
        "assigned reviewer, bob."
    )
    sent = Message.objects.filter(escalation=escalation).order_by("id")
    assert [(m.reason, m.target) for m in sent] == [
        ("opened", "desk@example.com"),
        ("assigned", "bob@example.com"),
    ]
    delivery = Delivery.objects.get(type="escalation.opened", payload__data__task="b")
    assert delivery.payload["data"]["escalation"] == escalation.pk


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


def redis_cache_url() -> str:
    """The suite's Redis cache (a parallel worker's own database), or Redis's last database."""
    url = os.environ.get("CACHE_URL", "")
    return url if url.startswith("redis") else "redis://127.0.0.1:6379/15"


@pytest.fixture
def redis_cache(settings):
    settings.CACHES = {
        "default": {"BACKEND": "fleet.cache.RedisCache", "LOCATION": redis_cache_url()}
    }  # fmt: skip
    return caches["default"]


@pytest.fixture
def file_cache(settings, tmp_path):
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
                    "LOCATION": str(tmp_path)}
    }  # fmt: skip
    return caches["default"]


def test_on_redis_the_rate_count_is_one_round_trip_and_lapses_with_its_window(
    redis_cache, monkeypatch
):
    trips: list[str] = []
    monkeypatch.setattr(Pipeline, "execute", counting(Pipeline.execute, trips, "pipeline"))
    monkeypatch.setattr(Redis, "execute_command", counting(Redis.execute_command, trips, "command"))
    key = f"rate:test:{uuid.uuid4().hex}"
    assert [intake.counted(key, timeout=7) for _ in range(3)] == [1, 2, 3]
    assert trips == ["pipeline"] * 3
    name = redis_cache.make_and_validate_key(key)
    assert 0 < redis_cache._cache.get_client(name).ttl(name) <= 7
    assert redis_cache.get(key) == 3


def test_elsewhere_the_rate_count_is_kept_by_the_caches_own_calls(file_cache):
    # The window is in the key (rate:<agent>:<slot>): a count never runs into the next window.
    assert [intake.counted("rate:a:1", timeout=7) for _ in range(3)] == [1, 2, 3]
    assert intake.counted("rate:a:2", timeout=7) == 1
    assert file_cache.get("rate:a:1") == 3


def counting(call, trips: list[str], name: str):
    def counted(*args, **kwargs):
        trips.append(name)
        return call(*args, **kwargs)

    return counted


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
    # The database is up: the answer says what happened, not that it is down.
    assert response.json()["errors"] == [
        {
            "loc": "database",
            "msg": "conflicted with concurrent changes to the same rows and was rolled back; "
            "nothing was changed: retry in a moment",
        }
    ]
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
