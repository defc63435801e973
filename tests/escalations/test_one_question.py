"""One question, one answer: packets of a fleet that ask the same question wait on one
escalation, whose one answer reframes and releases every task waiting on it."""

import threading
from typing import Any

import pytest
from django.test import TestCase

from escalations.models import Answer, Escalation, JoinedTask
from escalations.services import escalation_abort, escalation_reroute
from fleet import services as fleet_services
from fleet.models import ApiToken, Delivery
from runs.models import Blocker, Claim, Hold, Task
from tests.conftest import REFUSED_CALLBACK, make_sender, signed_in
from tests.escalations.desk import QUESTION, Desk, packet
from tests.escalations.drafting import escalated_by_the_policy, orders_database
from tests.escalations.routed import due, pool, route

pytestmark = pytest.mark.django_db


@pytest.fixture
def desk_callback_url() -> str:
    return REFUSED_CALLBACK


def three_runs(desk: Desk) -> None:
    """Three runs of the fleet, each with one task for each of three agents."""
    for key, agent in (("r-planner", "planner"), ("r-coder", "coder"), ("r-coder-b", "coder-b")):
        desk.run(key, [{"key": "step", "agent": agent}])


def submit(desk: Desk, run: str, task: str = "step", **changes: Any) -> Any:
    """The task starts and stops with a packet; the webhook's answer."""
    started = desk.planner.post(
        "task.started",
        {
            "run": run,
            "task": task,
            "agent": desk.agent_of(run, task),
            "attempt": {"prompt_hash": f"p{desk.attempts(run, task) + 1}", "context_hash": "c"},
        },
    )
    assert started.status_code == 202, started.content
    return send_packet(desk, run, task, **changes)


def send_packet(desk: Desk, run: str, task: str = "step", **changes: Any) -> Any:
    return desk.planner.post(
        "packet.submitted",
        {
            "run": run,
            "task": task,
            "agent": desk.agent_of(run, task),
            "packet": packet(task, **changes),
        },
    )


def answer(user: Any, escalation_id: int, text: str) -> Any:
    with TestCase.captureOnCommitCallbacks(execute=True):
        return signed_in(user).post(
            f"/escalations/{escalation_id}/answer/", {"text": text}, HTTP_HX_REQUEST="true"
        )


def test_three_packets_with_the_same_question_wait_on_one_escalation(desk, alice):
    three_runs(desk)
    first = submit(desk, "r-planner")
    assert first.status_code == 202 and first.json()["packet"] == "opened"
    # The same question in other typing: case, spacing and punctuation do not matter.
    second = submit(desk, "r-coder", smallest_unblocking_question="  " + QUESTION.upper())
    third = submit(
        desk, "r-coder-b", smallest_unblocking_question=QUESTION.replace(",", " ;").replace(":", "")
    )
    shared = first.json()["escalation"]
    for joined in (second, third):
        assert joined.status_code == 202, joined.content
        body = joined.json()
        assert (body["escalation"], body["packet"], body["joined"]) == (
            shared,
            "joined",
            {"run": "r-planner", "task": "step"},
        )
    assert Escalation.objects.filter(task__key="step").count() == 1
    assert JoinedTask.objects.filter(escalation_id=shared, left_at=None).count() == 2
    for run in ("r-planner", "r-coder", "r-coder-b"):
        task = Task.objects.get(run__key=run, key="step")
        assert task.state == "escalated"
        assert Hold.objects.filter(task=task, code=f"escalation:{shared}", lifted_at=None).exists()

    response = answer(alice, shared, "Use the loyalty_points threshold")
    assert response.status_code == 200
    assert "released 3 tasks" in response.content.decode()
    for run in ("r-planner", "r-coder", "r-coder-b"):
        task = Task.objects.get(run__key=run, key="step")
        assert task.state == "pending" and task.ready, run
        assert not Hold.objects.filter(task=task, lifted_at=None).exists()
        assert not Blocker.objects.filter(task=task, cleared_at=None).exists()
        assert Claim.objects.get(run__key=run, key=f"answer.escalation-{shared}").status == (
            "verified"
        )
    reframed = Delivery.objects.filter(type="task.reframed")
    assert sorted(d.payload["data"]["run"] for d in reframed) == [
        "r-coder",
        "r-coder-b",
        "r-planner",
    ]
    assert all(
        d.payload["data"]["ground_truth"][-1]["answer"] == "Use the loyalty_points threshold"
        for d in reframed
    )
    assert Answer.objects.get(escalation_id=shared).released == [
        "step",
        "r-coder/step",
        "r-coder-b/step",
    ]
    assert set(JoinedTask.objects.values_list("left", flat=True)) == {"answered"}


def test_two_tasks_of_one_run_share_an_answer_each_with_its_own_claim(desk, alice):
    desk.run("pair", [{"key": "a", "agent": "coder"}, {"key": "b", "agent": "coder-b"}])
    shared = submit(desk, "pair", "a").json()["escalation"]
    assert submit(desk, "pair", "b").json()["escalation"] == shared
    assert answer(alice, shared, "Use the threshold").status_code == 200
    assert set(Task.objects.filter(run__key="pair").values_list("state", flat=True)) == {"pending"}
    keys = set(Claim.objects.filter(run__key="pair").values_list("key", flat=True))
    assert keys == {f"answer.escalation-{shared}", f"answer.escalation-{shared}.b"}


def test_the_same_dedup_key_joins_whatever_the_words_and_different_keys_never_do(desk):
    three_runs(desk)
    shared = submit(desk, "r-planner", dedup_key="tier-source").json()["escalation"]
    other_words = submit(
        desk, "r-coder", dedup_key="tier-source", smallest_unblocking_question="Which tier source?"
    )
    assert other_words.json()["escalation"] == shared
    same_words_other_key = submit(desk, "r-coder-b", dedup_key="tier-threshold")
    assert same_words_other_key.json()["packet"] == "opened"
    assert same_words_other_key.json()["escalation"] != shared


@pytest.mark.parametrize(
    ("dedup_key", "says"),
    [
        (42, "must be a string, not a number"),
        ("", "is empty"),
        ("x" * 201, "is 201 characters"),
        ("tier source", "contains a space or a control character"),
        ("tier\x07", "contains a space or a control character"),
        ("tier\u200bsource", "contains a space or a control character"),
        ("tier\u034fsource", "contains U+034F, which shows nothing on its own"),
        ("tier\u3164source", "contains U+3164, which shows nothing on its own"),
        ("tier\u2800", "contains U+2800, which shows nothing on its own"),
        ("tier\ufe0f", "contains U+FE0F, which shows nothing on its own"),
    ],
)
def test_a_bad_dedup_key_is_refused_naming_it(desk, dedup_key, says):
    response = submit(desk, "tier-discounts", "plan", dedup_key=dedup_key)
    assert response.status_code == 422
    (error,) = response.json()["errors"]
    assert error["loc"] == "data.packet.dedup_key" and says in error["msg"], error
    assert not Escalation.objects.exists()


def test_a_task_of_another_fleet_never_joins(desk, client):
    other = fleet_services.fleet_create(name="globex")
    agent = make_sender(client, other, "planner", orchestrator=True)
    assert (
        agent.post(
            "run.started", {"run": "g", "tasks": [{"key": "step", "agent": "planner"}]}
        ).status_code
        == 202
    )
    mine = desk.escalate()
    agent.post(
        "task.started",
        {"run": "g", "task": "step", "attempt": {"prompt_hash": "p", "context_hash": "c"}},
    )
    theirs = agent.post("packet.submitted", {"run": "g", "task": "step", "packet": packet("step")})
    assert theirs.status_code == 202 and theirs.json()["packet"] == "opened"
    assert theirs.json()["escalation"] != mine.pk


def test_a_joined_task_sending_its_packet_again_changes_nothing(desk):
    three_runs(desk)
    shared = submit(desk, "r-planner").json()["escalation"]
    submit(desk, "r-coder")
    again = send_packet(desk, "r-coder")
    assert again.json()["packet"] == "unchanged" and again.json()["escalation"] == shared
    reworded = send_packet(desk, "r-coder", smallest_unblocking_question=QUESTION.lower())
    assert reworded.json()["packet"] == "replaced" and reworded.json()["escalation"] == shared
    assert JoinedTask.objects.filter(left_at=None).count() == 1
    assert Escalation.objects.count() == 1


@pytest.mark.parametrize("run", ["r-planner", "r-coder"])  # the escalation's task, a joined one
def test_a_packet_sent_again_after_its_answer_is_refused_with_the_answer(desk, alice, run):
    three_runs(desk)
    shared = submit(desk, "r-planner").json()["escalation"]
    submit(desk, "r-coder")
    answer(alice, shared, "Tiers live in billing.customer_tiers")

    again = send_packet(desk, run)
    assert again.status_code == 422, again.content
    assert again.json()["errors"] == [
        {
            "loc": "data.packet",
            "msg": f"asks what escalation {shared} answered, and its tried says nothing the "
            "answered packet did not; the answer: 'Tiers live in billing.customer_tiers'. Start "
            "the task's next attempt with it as ground truth; if that attempt stops too, send "
            "what it tried",
        }
    ]
    # After the next attempt too: sent unchanged, it asks what was answered.
    assert submit(desk, run).status_code == 422
    assert Escalation.objects.count() == 1
    assert Task.objects.get(run__key=run).state != "escalated"
    # What that attempt tried is a new packet: it waits on a reviewer again.
    tried = [*packet()["tried"], "Read billing.customer_tiers: it has no row for EU customers"]
    stopped = send_packet(desk, run, tried=tried)
    assert stopped.status_code == 202 and stopped.json()["packet"] == "opened"


TRIED = packet()["tried"]


@pytest.mark.parametrize(
    "changes",
    [
        {"urgency": "high"},
        {"options": ["billing.customer_tiers", "pricing.yaml"]},
        {"dedup_key": "tier-source"},
        {"smallest_unblocking_question": QUESTION.lower()},
        {"smallest_unblocking_question": QUESTION.rstrip("?") + " ?"},
        {"smallest_unblocking_question": QUESTION.replace("tier", "ti\u200ber", 1)},
        {"tried": [TRIED[0].replace(" ", "  ", 1), *TRIED[1:]]},
        {"tried": [*TRIED, TRIED[0]]},
        {"tried": [w for line in TRIED for w in line.split(" ", 1)]},  # the lines split
        {"ruled_out": []},
    ],
)
def test_a_trivially_changed_packet_after_its_answer_is_refused(desk, alice, changes):
    three_runs(desk)
    shared = submit(desk, "r-planner").json()["escalation"]
    answer(alice, shared, "Tiers live in billing.customer_tiers")

    again = send_packet(desk, "r-planner", **changes)
    assert again.status_code == 422, again.content
    assert f"asks what escalation {shared} answered" in again.json()["errors"][0]["msg"]
    assert Escalation.objects.count() == 1


def test_another_question_after_an_answer_is_a_new_escalation(desk, alice):
    three_runs(desk)
    shared = submit(desk, "r-planner").json()["escalation"]
    answer(alice, shared, "Tiers live in billing.customer_tiers")

    other = send_packet(desk, "r-planner", smallest_unblocking_question="Which currency?")
    assert other.status_code == 202 and other.json()["packet"] == "opened"


def test_a_joined_task_that_asks_another_question_gets_its_own_escalation(desk):
    three_runs(desk)
    shared = submit(desk, "r-planner").json()["escalation"]
    submit(desk, "r-coder")
    other = send_packet(
        desk, "r-coder", smallest_unblocking_question="Which currency do we bill in?"
    )
    assert other.json()["packet"] == "opened" and other.json()["escalation"] != shared
    moved = JoinedTask.objects.get()
    assert (moved.left, moved.note) == ("moved", "step sent another question")
    task = Task.objects.get(run__key="r-coder")
    assert task.state == "escalated"
    codes = set(Hold.objects.filter(task=task, lifted_at=None).values_list("code", flat=True))
    assert codes == {f"escalation:{other.json()['escalation']}"}


def test_a_reviewer_splits_off_a_task_whose_question_only_looks_alike(desk, alice):
    three_runs(desk)
    shared = submit(desk, "r-planner").json()["escalation"]
    submit(desk, "r-coder")
    task = Task.objects.get(run__key="r-coder")
    with TestCase.captureOnCommitCallbacks(execute=True):
        response = signed_in(alice).post(
            f"/escalations/{shared}/split/", {"task": task.pk}, HTTP_HX_REQUEST="true"
        )
    assert response.status_code == 200, response.content
    split = Escalation.objects.get(task=task)
    assert split.pk != shared and split.status == "open"
    assert "split it off escalation" in split.reason
    assert set(Hold.objects.filter(task=task, lifted_at=None).values_list("code", flat=True)) == {
        f"escalation:{split.pk}"
    }
    # Sending the same question again does not put it back: a reviewer said they differ.
    again = send_packet(desk, "r-coder", smallest_unblocking_question=QUESTION + " ")
    assert again.json()["escalation"] == split.pk
    # Splitting it again is refused: it no longer waits there.
    refused = signed_in(alice).post(
        f"/escalations/{shared}/split/", {"task": task.pk}, HTTP_HX_REQUEST="true"
    )
    assert refused.status_code == 409
    assert "not waiting on this escalation" in refused.content.decode()


@pytest.mark.parametrize("task", ["²", "٣", "9" * 30])
def test_a_split_of_a_task_that_is_not_an_id_is_refused_not_a_500(desk, alice, task):
    """ "²".isdigit() is true and int("²") fails; 30 digits overflow the column: both were 500s."""
    three_runs(desk)
    shared = submit(desk, "r-planner").json()["escalation"]
    submit(desk, "r-coder")
    refused = signed_in(alice).post(
        f"/escalations/{shared}/split/", {"task": task}, HTTP_HX_REQUEST="true"
    )
    assert refused.status_code == 409
    assert "not waiting on this escalation" in refused.content.decode()
    assert JoinedTask.objects.get().left_at is None


def test_aborting_the_escalations_task_hands_the_joined_tasks_a_new_escalation(desk, alice):
    three_runs(desk)
    shared = submit(desk, "r-planner").json()["escalation"]
    submit(desk, "r-coder")
    submit(desk, "r-coder-b")
    with TestCase.captureOnCommitCallbacks(execute=True):
        escalation_abort(escalation=Escalation.objects.get(pk=shared), reviewer=alice, reason="no")
    moved = Escalation.objects.get(task__run__key="r-coder")
    assert moved.status == "open" and f"escalation {shared}" in moved.reason
    (rejoined,) = JoinedTask.objects.filter(left_at=None)
    assert rejoined.escalation == moved and rejoined.task.run.key == "r-coder-b"
    assert Escalation.objects.get(pk=shared).outcome == "aborted"


def test_a_joined_task_whose_run_fails_leaves_and_the_answer_releases_the_rest(desk, alice):
    desk.run("doomed", [{"key": "x", "agent": "coder"}, {"key": "y", "agent": "coder-b"}])
    three_runs(desk)
    shared = submit(desk, "r-planner").json()["escalation"]
    submit(desk, "doomed", "x")
    other = submit(desk, "doomed", "y", smallest_unblocking_question="Which currency?").json()
    with TestCase.captureOnCommitCallbacks(execute=True):
        escalation_abort(
            escalation=Escalation.objects.get(pk=other["escalation"]), reviewer=alice, reason="no"
        )
    left = JoinedTask.objects.get(task__run__key="doomed")
    assert left.left == "closed" and "run doomed failed" in left.note
    assert answer(alice, shared, "Use the threshold").status_code == 200
    assert Answer.objects.get(escalation_id=shared).released == ["step"]


def test_a_drafted_escalation_joins_when_its_agent_sends_the_question(desk, tmp_path):
    """The retry policy escalated with Bulkhead's draft; the question the agent fills in is one
    another task already waits on: the task joins it, and its draft's escalation closes."""
    three_runs(desk)
    shared = submit(desk, "r-coder").json()["escalation"]
    orders_database(desk.fleet, tmp_path)
    drafted = escalated_by_the_policy(desk)
    assert drafted.packet.drafted
    filled = desk.planner.post(
        "packet.submitted",
        {
            "run": "tier-discounts",
            "task": "plan",
            "packet": {"smallest_unblocking_question": QUESTION},
        },
    )
    assert filled.json()["packet"] == "joined" and filled.json()["escalation"] == shared
    drafted.refresh_from_db()
    assert (drafted.status, drafted.outcome) == ("closed", "joined")
    plan = Task.objects.get(run__key="tier-discounts", key="plan")
    assert set(Hold.objects.filter(task=plan, lifted_at=None).values_list("code", flat=True)) == {
        f"escalation:{shared}"
    }


def test_the_apis_show_every_task_waiting_and_each_tasks_shared_escalation(desk, client):
    three_runs(desk)
    shared = submit(desk, "r-planner").json()["escalation"]
    submit(desk, "r-coder")
    _, token = ApiToken.issue(desk.planner.agent)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    body = client.get(f"/api/v1/escalations/{shared}", **auth).json()
    assert [(t["run"], t["task"], t["joined"]) for t in body["tasks"]] == [
        ("r-planner", "step", False),
        ("r-coder", "step", True),
    ]
    run = client.get("/api/v1/runs/r-coder", **auth).json()
    (step,) = run["tasks"]
    assert step["escalation"]["id"] == shared and step["escalation"]["status"] == "open"
    assert step["escalation"]["joined"] is True and step["escalation"]["question"] == QUESTION


def test_a_run_whose_task_joined_lists_the_shared_escalation_and_then_its_answer(
    desk, client, alice
):
    # Without a callback, the joined task's agent polls its own run's escalations.
    three_runs(desk)
    shared = submit(desk, "r-planner").json()["escalation"]
    submit(desk, "r-coder")
    _, token = ApiToken.issue(desk.planner.agent)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    (row,) = client.get("/api/v1/runs/r-coder/escalations", **auth).json()
    assert (row["id"], row["task"], row["status"]) == (shared, "step", "open")
    assert row["question"] == QUESTION and row["answer"] is None
    answer(alice, shared, "The loyalty_points threshold.")
    (row,) = client.get("/api/v1/runs/r-coder/escalations", **auth).json()
    assert row["status"] == "answered"
    assert row["answer"]["text"] == "The loyalty_points threshold."
    (own,) = client.get("/api/v1/runs/r-planner/escalations", **auth).json()
    assert (own["id"], own["task"]) == (shared, "step")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(4))
def test_an_answer_racing_a_join_never_leaves_a_task_waiting_on_an_answered_escalation(
    client, fleet, attempt
):
    """The answer locks every task waiting, then the escalation; the join locks the escalation
    and reads it again: it joins before the answer (and is released by it) or finds it answered
    and opens its own. Either way, no task waits on an answered escalation."""
    from django.db import connection
    from django.test import Client

    from tests.conftest import Sender, wsgi_headers
    from tests.escalations.desk import member

    fleet.callback_url = REFUSED_CALLBACK
    fleet.save()
    desk = Desk(client, fleet)
    three_runs(desk)
    shared = submit(desk, "r-planner").json()["escalation"]
    desk.planner.post(
        "task.started",
        {"run": "r-coder", "task": "step", "agent": "coder",
         "attempt": {"prompt_hash": "p1", "context_hash": "c"}},
    )  # fmt: skip
    alice = member("alice", fleet)
    barrier = threading.Barrier(2)
    results: dict[str, Any] = {}

    def answer_it() -> None:
        browser = signed_in(alice)
        barrier.wait()
        try:
            results["answer"] = browser.post(
                f"/escalations/{shared}/answer/", {"text": "Use the threshold"}
            )
        finally:
            connection.close()

    def join_it() -> None:
        sender = Sender(Client(), desk.planner.agent, desk.planner.secret)
        body = sender.body(
            "packet.submitted",
            {"run": "r-coder", "task": "step", "agent": "coder", "packet": packet("step")},
        )
        barrier.wait()
        try:
            results["join"] = sender.client.generic(
                "POST", sender.path, body, content_type="application/json",
                **wsgi_headers(sender.headers(body)),
            )  # fmt: skip
        finally:
            connection.close()

    threads = [threading.Thread(target=answer_it), threading.Thread(target=join_it)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    finally:
        # Eager tasks ran in both threads at once, and celery keeps "a task is running here" in
        # one flag per process that each saves and restores: it may be left set, which refuses
        # every later `.get()` of this process. Nothing runs now: clear it.
        from celery._state import _set_task_join_will_block

        _set_task_join_will_block(False)

    assert results["answer"].status_code in (200, 302)
    assert results["join"].status_code == 202, results["join"].content
    joined = results["join"].json()
    task = Task.objects.get(run__key="r-coder", key="step")
    assert Escalation.objects.get(pk=shared).status == "answered"
    assert not JoinedTask.objects.filter(escalation_id=shared, left_at=None).exists()
    if joined["packet"] == "joined":  # it came first: the answer released it too
        assert task.state == "pending"
        assert Claim.objects.filter(run__key="r-coder", key=f"answer.escalation-{shared}").exists()
    else:  # the answer came first: it waits on its own escalation
        assert joined["packet"] == "opened" and joined["escalation"] != shared
        assert task.state == "escalated"
        assert Escalation.objects.get(pk=joined["escalation"]).status == "open"


def test_the_run_page_of_a_joined_task_says_which_escalation_it_waits_on(desk, alice):
    three_runs(desk)
    shared = submit(desk, "r-planner").json()["escalation"]
    submit(desk, "r-coder")
    run = Task.objects.get(run__key="r-coder").run
    page = signed_in(alice).get(f"/runs/{run.pk}/").content.decode()
    assert f'waits on <a href="/escalations/{shared}/">escalation {shared}</a>' in page
    assert "opened by step of run r-planner" in page
    assert "Nothing escalated." not in page


def test_rerouting_the_escalations_task_hands_the_joined_task_a_new_escalation(desk, alice):
    three_runs(desk)
    shared = submit(desk, "r-planner").json()["escalation"]
    submit(desk, "r-coder")
    with TestCase.captureOnCommitCallbacks(execute=True):
        escalation_reroute(
            escalation=Escalation.objects.get(pk=shared), reviewer=alice, agent="coder", note="x"
        )
    assert Escalation.objects.get(pk=shared).outcome == "rerouted"
    moved = Escalation.objects.get(task__run__key="r-coder")
    assert moved.status == "open" and "was rerouted by alice" in moved.reason
    left = JoinedTask.objects.get()
    assert (left.left, left.left_at is not None) == ("moved", True)
    task = Task.objects.get(run__key="r-coder")
    assert set(Hold.objects.filter(task=task, lifted_at=None).values_list("code", flat=True)) == {
        f"escalation:{moved.pk}"
    }
    page = signed_in(alice).get(f"/escalations/{shared}/").content.decode()
    assert f"escalation {shared} rerouted by alice</strong>" in page


def routed_like_any_other(escalation: Escalation) -> None:
    """Pool, reviewer, due time and the assignment in its history, as a packet's own gets."""
    escalation.refresh_from_db()
    assert escalation.pool is not None and escalation.pool.name == "desk-pool"
    assert escalation.assignee is not None and escalation.due_at is not None
    assert escalation.assignments.filter(kind="routed").count() == 1


@pytest.fixture
def pooled(desk, alice):
    pool(desk.fleet, "desk-pool", "alice")
    route(desk.fleet, "desk-pool")
    due(desk.fleet, 240)
    three_runs(desk)
    shared = submit(desk, "r-planner").json()["escalation"]
    routed_like_any_other(Escalation.objects.get(pk=shared))
    submit(desk, "r-coder")
    return shared


def test_the_escalation_a_joined_task_moves_to_is_routed(desk, alice, pooled):
    with TestCase.captureOnCommitCallbacks(execute=True):
        escalation_abort(escalation=Escalation.objects.get(pk=pooled), reviewer=alice, reason="no")
    routed_like_any_other(Escalation.objects.get(task__run__key="r-coder"))


def test_the_escalation_split_off_for_a_joined_task_is_routed(desk, alice, pooled):
    task = Task.objects.get(run__key="r-coder")
    with TestCase.captureOnCommitCallbacks(execute=True):
        signed_in(alice).post(
            f"/escalations/{pooled}/split/", {"task": task.pk}, HTTP_HX_REQUEST="true"
        )
    routed_like_any_other(Escalation.objects.get(task=task))


def test_the_escalation_of_a_joined_task_asking_another_question_is_routed(desk, pooled):
    other = send_packet(
        desk, "r-coder", smallest_unblocking_question="Which currency do we bill in?"
    )
    routed_like_any_other(Escalation.objects.get(pk=other.json()["escalation"]))


def test_the_runs_list_counts_each_task_waiting_on_the_shared_question(desk, alice):
    """Two tasks of one run wait on one escalation: the runs list said 1 (escalations); it
    counts the tasks with a person, 2."""
    desk.run("eu", [{"key": "invoice", "agent": "coder"}, {"key": "tax", "agent": "coder-b"}])
    shared = submit(desk, "eu", "invoice").json()["escalation"]
    assert submit(desk, "eu", "tax").json()["escalation"] == shared

    page = signed_in(alice).get("/runs/").content.decode()

    row = page[page.index(">eu<") : page.index("</tr>", page.index(">eu<"))]
    assert '#escalations-title">2</a>' in row
