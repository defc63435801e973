"""Copies of one event, or of one batch, at the same moment apply once (PostgreSQL, real
transactions)."""

import json
import threading
from collections.abc import Callable

import pytest
from django.db import connection
from django.test import Client

from escalations.models import Escalation
from fleet.models import Event
from runs.models import Run, Task
from tests.conftest import task, wsgi_headers


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_twenty_simultaneous_copies_apply_once_and_get_the_first_response(planner, coder):
    body = planner.body(
        "run.started", {"run": "r1", "tasks": [task("a"), task("b", prerequisites=["a"])]}
    )
    headers = planner.headers(body, webhook_id="msg_twenty")
    barrier = threading.Barrier(20)
    responses: list = []
    lock = threading.Lock()

    def send() -> None:
        client = Client()
        extra = wsgi_headers(headers)
        barrier.wait()
        response = client.generic(
            "POST", planner.path, body, content_type="application/json", **extra
        )
        with lock:
            responses.append((response.status_code, response.json()))
        connection.close()

    threads = [threading.Thread(target=send) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert [status for status, _ in responses] == [202] * 20
    assert len({json.dumps(body, sort_keys=True) for _, body in responses}) == 1
    assert Event.objects.filter(webhook_id="msg_twenty").count() == 1
    assert Run.objects.count() == 1
    assert Task.objects.count() == 2


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_simultaneous_different_ids_for_one_run_leave_one_run(planner, coder):
    body_data = {"run": "r1", "tasks": [task("a")]}
    barrier = threading.Barrier(5)
    statuses: list[int] = []

    def send(i: int) -> None:
        client = Client()
        body = planner.body("run.started", body_data)
        extra = wsgi_headers(planner.headers(body, webhook_id=f"msg_{i}"))
        barrier.wait()
        response = client.generic(
            "POST", planner.path, body, content_type="application/json", **extra
        )
        statuses.append(response.status_code)
        connection.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [202] * 5
    assert Run.objects.count() == 1
    assert Task.objects.count() == 1


PACKET = {
    "tried": ["re-ran the migration"],
    "ruled_out": [],
    "evidence": [
        {"kind": "query_result", "source": "SELECT 1", "payload_hash": "sha256:" + "ab" * 32}
    ],
    "smallest_unblocking_question": "Which field decides the discount tier?",
}
HASHES = {"prompt_hash": "sha256:" + "a" * 64, "context_hash": "sha256:" + "b" * 64}


def running(planner, coder, keys: list[str]) -> None:
    """Run r1 declared with these tasks, each started by the coder."""
    declared = planner.post("run.started", {"run": "r1", "tasks": [task(k) for k in keys]})
    assert declared.status_code == 202
    for key in keys:
        started = coder.post("task.started", {"run": "r1", "task": key, "attempt": HASHES})
        assert started.status_code == 202


def packets_at_once(
    coder, packets: list[dict], *, also: Callable[[], object] | None = None
) -> list[tuple[int, dict]]:
    """Each packet.submitted posted from its own thread and connection at the same moment (and
    `also` called from one more); the answers, in the packets' order."""
    barrier = threading.Barrier(len(packets) + (also is not None))
    answers: list = [None] * len(packets)

    def call_also() -> None:
        assert also is not None
        barrier.wait()
        also()
        connection.close()

    def send(i: int) -> None:
        data = {"run": "r1", "task": packets[i]["task"], "packet": packets[i]}
        body = coder.body("packet.submitted", data)
        extra = wsgi_headers(coder.headers(body))
        barrier.wait()
        response = Client().generic(
            "POST", coder.path, body, content_type="application/json", **extra
        )
        answers[i] = (response.status_code, response.json())
        connection.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(packets))]
    if also is not None:
        threads.append(threading.Thread(target=call_also))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_agents_asking_one_question_at_once_all_get_202_and_one_escalation(planner, coder):
    """Eight tasks fail together on the same question: each packet is applied (a transaction
    PostgreSQL rolls back to break a deadlock between two of them is applied again, never a
    503), and they wait on one escalation."""
    keys = [f"t{i}" for i in range(8)]
    running(planner, coder, keys)
    answers = packets_at_once(coder, [{**PACKET, "task": key} for key in keys])
    assert [status for status, _ in answers] == [202] * len(keys), answers
    assert Escalation.objects.filter(status=Escalation.Status.OPEN).count() == 1
    assert Task.objects.filter(state=Task.State.ESCALATED).count() == len(keys)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_one_task_sending_packets_at_once_waits_on_one_escalation(planner, coder):
    """A careless agent sends eight packets for one task at the same moment, each asking its own
    question: the task still waits on one escalation (the first opens it, the rest replace its
    packet, as they would one after another), with one hold."""
    from runs.models import Hold

    running(planner, coder, ["t0"])
    asking = "Which field decides the discount tier, source number {}?"
    answers = packets_at_once(
        coder,
        [
            {**PACKET, "task": "t0", "smallest_unblocking_question": asking.format(i)}
            for i in range(8)
        ],
    )
    assert [status for status, _ in answers] == [202] * 8, answers
    waiting = Escalation.objects.filter(status__in=Escalation.OPEN_STATES)
    assert waiting.count() == 1
    assert sorted(body["packet"] for _, body in answers) == ["opened"] + ["replaced"] * 7
    assert {body["escalation"] for _, body in answers} == {waiting.get().pk}
    assert Hold.objects.filter(lifted_at__isnull=True).count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_packet_sent_again_while_it_is_answered_never_reopens_the_question(planner, coder):
    """A careless agent resends its packet from eight threads while a reviewer answers it:
    each copy is unchanged (before the answer) or refused with the answer (after), and nothing
    waits on a reviewer afterwards (a copy that waited for the escalation's lock while the
    answer committed opened a new escalation asking what was just answered)."""
    from escalations.services import escalation_answer
    from fleet.services import member_add

    running(planner, coder, ["t0"])
    [(status, body)] = packets_at_once(coder, [{**PACKET, "task": "t0"}])
    assert status == 202, body
    reviewer, _ = member_add(username="rita", fleet=coder.agent.fleet, role="reviewer")
    escalation = Escalation.objects.get()

    answers = packets_at_once(
        coder,
        [{**PACKET, "task": "t0"}] * 8,
        also=lambda: escalation_answer(
            escalation=escalation, reviewer=reviewer, text="billing.tiers"
        ),
    )

    assert Escalation.objects.count() == 1 and Escalation.objects.get().status == "answered"
    for status, body in answers:
        assert (status, body.get("packet")) == (202, "unchanged") or (
            status == 422 and "the answer: 'billing.tiers'" in body["errors"][0]["msg"]
        ), body


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_simultaneous_copies_of_one_batch_apply_each_event_once(planner, coder):
    from runs.models import Claim
    from tests.fleet.test_batches import batch_path, event

    assert planner.post("run.started", {"run": "r1", "tasks": [task("a")]}).status_code == 202
    events = [
        event("claim.posted", {"run": "r1", "task": "a",
                               "claim": {"key": f"k{n}", "statement": f"fact {n}"}})
        for n in range(50)
    ]  # fmt: skip
    body = json.dumps({"events": events}).encode()
    barrier = threading.Barrier(6)
    responses: list = []
    lock = threading.Lock()

    def send(i: int) -> None:
        client = Client()
        extra = wsgi_headers(coder.headers(body, webhook_id=f"msg_batch_{i}"))
        barrier.wait()
        response = client.generic(
            "POST", batch_path(coder), body, content_type="application/json", **extra
        )
        with lock:
            responses.append((response.status_code, response.json()))
        connection.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert [status for status, _ in responses] == [200] * 6
    results = [reply["results"] for _, reply in responses]
    assert all(r == results[0] for r in results)  # every copy gets the first results
    assert [r["status"] for r in results[0]] == [202] * 50
    assert Event.objects.filter(type="claim.posted").count() == 50
    assert Claim.objects.filter(run__key="r1").count() == 50


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_batches_finishing_the_same_tasks_at_once_finish_each_once(planner, coder):
    from runs.models import Attempt
    from tests.fleet.test_batches import batch_path, event

    keys = [f"t{n}" for n in range(20)]
    running(planner, coder, keys)
    failure = {"kind": "reasoning", "signature": "s", "message": "wrong tier"}
    outcomes = {
        "succeeded": {"outcome": "succeeded"},
        "failed": {"outcome": "failed", "failure": failure},
    }
    barrier = threading.Barrier(2)
    replies: dict[str, list] = {}

    def send(name: str) -> None:
        events = [event("task.finished", {"run": "r1", "task": k, **outcomes[name]}) for k in keys]
        body = json.dumps({"events": events}).encode()
        extra = wsgi_headers(coder.headers(body, webhook_id=f"msg_{name}"))
        barrier.wait()
        response = Client().generic(
            "POST", batch_path(coder), body, content_type="application/json", **extra
        )
        replies[name] = [r["status"] for r in response.json()["results"]]
        connection.close()

    threads = [threading.Thread(target=send, args=(name,)) for name in outcomes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    for n, key in enumerate(keys):  # each task finished once: one 202, the other copy 409
        assert sorted([replies["succeeded"][n], replies["failed"][n]]) == [202, 409], key
        won = "succeeded" if replies["succeeded"][n] == 202 else "failed"
        assert Attempt.objects.get(task__key=key).outcome == won
    assert Event.objects.filter(type="task.finished").count() == 20
