"""The fault suite: Bulkhead in production shape (gunicorn, two Celery workers, beat) on its own
PostgreSQL and Redis, under traffic from agents, while a service or a process fails.

Each test reconciles what the agents sent against what PostgreSQL applied and what the fleet's
callback received: every event applied exactly once, every run whole, every task.ready recorded
once and received (a receipt may repeat only under the same webhook-id: delivery is at least
once, and the receiver dedupes on the id). The figures go to var/faults.json (see conftest).
"""

import threading
import time
from collections import Counter
from typing import Any

import pytest

from tests.conftest import HANG
from tests.faults.conftest import FIGURES
from tests.faults.stack import Sent, Stack, Traffic, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(240)]

OUTAGE_S = 10.0
DRAIN_TIMEOUT_S = 90.0


def answers(sent: list[Sent]) -> Counter[int]:
    return Counter(status for s in sent for status in s.statuses)


def wait_for_deliveries(stack: Stack, sent: list[Sent]) -> float:
    """Wait until every task of every run sent was received by the callback; returns when."""
    wanted = {(s.run, task) for s in sent for task in s.tasks}

    def all_received() -> bool:
        got = {pair for pairs in stack.received_ready().values() for pair in pairs}
        return wanted <= got

    wait_until(
        all_received, DRAIN_TIMEOUT_S, f"the callback to receive task.ready for {len(wanted)} tasks"
    )
    return time.time()


def reconcile(stack: Stack, sent: list[Sent], *, allowed: set[int]) -> dict[str, Any]:
    """Sent against applied against delivered; returns the counts, asserting nothing is lost."""
    assert sent, "the agents sent nothing"
    statuses = answers(sent)
    unexpected = {status: n for status, n in statuses.items() if status not in allowed}
    assert not unexpected, f"answers outside {sorted(allowed)}: {unexpected}"
    unfinished = [s.webhook_id for s in sent if not s.done_at]
    assert not unfinished, f"{len(unfinished)} events never applied (lost): {unfinished[:5]}"

    # Applied: one Event row per webhook-id, and each run whole (nothing half-written).
    applied = stack.applied([s.webhook_id for s in sent])
    assert set(applied) == {s.webhook_id for s in sent}
    assert set(applied.values()) == {1}, "an event was applied twice"
    width = {s.run: len(s.tasks) for s in sent}
    rows = stack.pg.query(
        "SELECT r.key, count(t.id) FROM runs_run r LEFT JOIN runs_task t ON t.run_id = r.id "
        "WHERE r.key = ANY(%s) GROUP BY r.key",
        list(width),
    )
    assert dict(rows) == width, "a run is missing or half-written"

    # Delivered: one task.ready per task recorded, each delivered, each received under its id.
    recorded = stack.deliveries(list(width))
    per_task = Counter((run, task) for _, run, task, _ in recorded)
    assert per_task == Counter({(s.run, t): 1 for s in sent for t in s.tasks}), (
        "a task's task.ready was recorded twice or not at all"
    )
    wait_until(
        lambda: all(status == "delivered" for *_, status in stack.deliveries(list(width))),
        30,
        "every recorded delivery to be marked delivered",
    )
    ids = {webhook_id for webhook_id, *_ in recorded}
    received = {k: v for k, v in stack.received_ready().items() if k in ids}
    assert set(received) == ids, "a recorded delivery never reached the receiver"
    stray = {
        webhook_id
        for webhook_id, pairs in stack.received_ready().items()
        if webhook_id not in ids and any(run in width for run, _ in pairs)
    }
    assert not stray, f"notifications under ids Bulkhead did not record: {stray}"
    repeats = {k: len(v) for k, v in received.items() if len(v) > 1}
    for webhook_id in repeats:
        assert len(set(received[webhook_id])) == 1, "one webhook-id carried different tasks"
    span = max(s.done_at for s in sent) - min(s.first_at for s in sent)
    return {
        "events_sent": len(sent),
        "events_per_s": round(len(sent) / span, 1),
        "answers": {str(k): v for k, v in sorted(statuses.items())},
        "events_applied_once": len(applied),
        "notifications_recorded": len(recorded),
        "notifications_received": sum(len(v) for v in received.values()),
        "repeated_receipts_same_webhook_id": sum(n - 1 for n in repeats.values()),
    }


def readyz_midway(stack: Stack) -> tuple[int, dict[str, Any], str]:
    """Sleep through the outage (OUTAGE_S), asking /readyz halfway through."""
    found: list[tuple[int, dict[str, Any], str]] = []
    time.sleep(OUTAGE_S / 2)
    asking = threading.Thread(target=lambda: found.append(stack.readyz()))
    asking.start()
    time.sleep(OUTAGE_S / 2)
    asking.join(30)
    assert found, "/readyz did not answer during the outage"
    return found[0]


def exits_between(stack: Stack, start: float, end: float) -> dict[str, int]:
    return {
        p.name: n
        for p in stack.processes
        if (n := sum(1 for at, _ in p.exits if start <= at <= end))
    }


def test_redis_down_for_10s_under_traffic(stack: Stack) -> None:
    """Broker and cache stop together: every event is still answered 202 and applied; the
    workers ride out the outage (none exits) and consume again once Redis is back; the
    reconciler re-enqueues the work whose messages the outage lost."""
    pids = {w.name: w.pid() for w in stack.workers}
    with Traffic(stack) as traffic:
        time.sleep(2)
        down_at = time.time()
        stack.redis.stop()
        during = readyz_midway(stack)
        stack.redis.start()
        up_at = time.time()
        time.sleep(3)
    sent = traffic.sent
    drained_at = wait_for_deliveries(stack, sent)
    figures = reconcile(stack, sent, allowed={202})

    status, body, _ = during
    assert status == 200, body
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["broker"].startswith("degraded"), body
    assert body["checks"]["cache"].startswith("degraded"), body
    during_outage = [s for s in sent if down_at <= s.first_at <= up_at]
    assert during_outage, "no event was posted while Redis was down"
    # The workers survived: same processes, no exit, and they consumed after Redis came back.
    assert {w.name: w.pid() for w in stack.workers} == pids
    assert not exits_between(stack, down_at, time.time()), stack.processes
    after = [s for s in sent if s.first_at > up_at]
    assert after, "no event was posted after Redis came back"
    FIGURES["redis_down"] = {
        **figures,
        "outage_s": round(up_at - down_at, 1),
        "events_posted_during_outage": len(during_outage),
        "slowest_answer_during_outage_s": round(
            max(s.done_at - s.first_at for s in during_outage), 2
        ),
        "readyz_during_outage": {"status": status, "checks": body["checks"]},
        "worker_exits": 0,
        "all_notifications_received_after_redis_back_s": round(drained_at - up_at, 1),
    }


def test_postgres_down_for_10s_under_traffic(stack: Stack) -> None:
    """The database stops (immediate shutdown, as in a crash): the webhook answers 503 with
    Retry-After, nothing is half-written, and the agents' retries are applied once after."""
    with Traffic(stack) as traffic:
        time.sleep(2)
        down_at = time.time()
        stack.pg.stop()
        during = readyz_midway(stack)
        stack.pg.start()
        up_at = time.time()
        time.sleep(3)
    sent = traffic.sent
    drained_at = wait_for_deliveries(stack, sent)
    figures = reconcile(stack, sent, allowed={202, 503})

    status, body, retry_after = during
    assert status == 503 and retry_after, (status, body)
    refused = [s for s in sent if 503 in s.statuses]
    assert refused, "no event was refused while PostgreSQL was down"
    assert all(
        r == Stack.ENV["DATABASE_RETRY_AFTER_SECONDS"] for s in refused for r in s.retry_after
    )
    # Each refused event was retried under its webhook-id until applied, and applied once
    # (reconcile checked the Event rows); the first success after the restart:
    first_ok = min(s.done_at for s in refused)
    last_ok = max(s.done_at for s in refused)
    FIGURES["postgres_down"] = {
        **figures,
        "outage_s": round(up_at - down_at, 1),
        "answers_503": sum(s.statuses.count(503) for s in sent),
        "events_retried_then_applied_once": len(refused),
        "retry_after_s": Stack.ENV["DATABASE_RETRY_AFTER_SECONDS"],
        "readyz_during_outage": {"status": status, "retry_after": retry_after},
        # up_at is when the restarted PostgreSQL first accepted a connection (polled every 0.1 s)
        "first_refused_event_applied_after_postgres_back_s": round(max(0.0, first_ok - up_at), 1),
        "last_refused_event_applied_after_postgres_back_s": round(max(0.0, last_ok - up_at), 1),
        "all_notifications_received_after_postgres_back_s": round(drained_at - up_at, 1),
        "process_exits": exits_between(stack, down_at, time.time()),
    }


def hold_a_notification(stack: Stack) -> tuple[Any, Any, int]:
    """Have the receiver hold the next notification, and find the worker sending it. The worker
    gives up on a request after DELIVERY_TIMEOUT_SECONDS: if it did before it was found, hold
    another."""
    receiver = stack.receiver
    for _ in range(3):
        receiver.release.clear()
        with receiver.lock:
            seen = len(receiver.received)
            receiver.script.append(HANG)
        held = wait_until(
            lambda seen=seen: receiver.received[seen] if len(receiver.received) > seen else None,
            30,
            "a notification to be held by the receiver",
        )
        try:
            return held, stack.worker_holding(held.peer), seen
        except LookupError:
            receiver.release.set()
    raise AssertionError("the worker sending a held notification could not be found three times")


def test_a_worker_sigkilled_mid_delivery(stack: Stack) -> None:
    """A worker is SIGKILLed while it sends a notification (the receiver holds the request):
    the notification is sent again once its lease runs out, the same webhook-id twice, which
    the receiver dedupes; the supervisor starts the worker again; nothing else is lost."""
    receiver = stack.receiver
    with Traffic(stack) as traffic:
        held, victim, seen = hold_a_notification(stack)
        ready_before = victim.log.read_text().count(" ready.")
        killed_at = time.time()
        victim.kill()
        receiver.release.set()  # the held request's worker is gone; its answer goes nowhere
        wait_until(
            lambda: victim.log.read_text().count(" ready.") > ready_before,
            60,
            "the supervisor to start the killed worker again",
        )
        restarted_at = time.time()
        time.sleep(2)
    sent = traffic.sent
    again = wait_until(
        lambda: next(
            (
                r
                for r in receiver.received[seen:]
                if r.webhook_id == held.webhook_id and r is not held
            ),
            None,
        ),
        60,
        "the held notification to be sent again",
    )
    drained_at = wait_for_deliveries(stack, sent)
    figures = reconcile(stack, sent, allowed={202})
    assert again.body == held.body
    assert any(code == -9 for _, code in victim.exits), victim.exits
    FIGURES["worker_sigkilled"] = {
        **figures,
        "notification_sent_again_after_kill_s": round(again.at - killed_at, 1),
        "worker_ready_again_after_kill_s": round(restarted_at - killed_at, 1),
        "all_notifications_received_after_kill_s": round(drained_at - killed_at, 1),
        "delivery_lease_s": Stack.ENV["DELIVERY_LEASE_SECONDS"],
    }


def test_the_receiver_down_then_up(stack: Stack) -> None:
    """The fleet's callback refuses connections for a while: notifications back off and retry,
    and the backlog drains once it is up, each under its own webhook-id."""
    receiver = stack.receiver
    with Traffic(stack) as traffic:
        time.sleep(2)
        receiver.stop()
        down_at = time.time()
        time.sleep(OUTAGE_S)
        # On a loaded machine the worker may not have tried the callback yet: the outage lasts
        # until a notification was refused (or the wait runs out, and the assertion below fails).
        try:
            backlog = wait_until(
                lambda: stack.pg.query(
                    "SELECT count(*) FROM fleet_delivery WHERE status = 'pending' AND attempts > 0"
                )[0][0],
                DRAIN_TIMEOUT_S,
                "a notification refused by the callback",
                interval=0.5,
            )
        except TimeoutError:
            backlog = 0
        receiver.start()
        up_at = time.time()
    sent = traffic.sent
    drained_at = wait_for_deliveries(stack, sent)
    figures = reconcile(stack, sent, allowed={202})
    assert backlog > 0, "nothing was waiting for the receiver"
    FIGURES["receiver_down"] = {
        **figures,
        "outage_s": round(up_at - down_at, 1),
        "backlog_when_back": backlog,
        "backlog_drained_after_receiver_back_s": round(drained_at - up_at, 1),
    }
