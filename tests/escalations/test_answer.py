"""Answering: a verified claim, a reframed next attempt with the answer as ground truth, the waiting
work released, the deliveries after commit; one answer per escalation, even at the same moment."""

import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.test import Client, TestCase

from escalations.models import Answer, Escalation
from fleet import services as fleet_services
from fleet.models import ApiToken, Delivery
from runs.models import Blocker, Claim, Decision, Evidence, Task
from tests.conftest import REFUSED_CALLBACK, signed_in, wsgi_headers
from tests.escalations.desk import OPTIONS, QUESTION, Desk, member

pytestmark = pytest.mark.django_db


@pytest.fixture
def desk_callback_url():
    return REFUSED_CALLBACK


def answer(browser, escalation, **form):
    with TestCase.captureOnCommitCallbacks(execute=True):
        return browser.post(f"/escalations/{escalation.pk}/answer/", form, HTTP_HX_REQUEST="true")


def test_the_answer_reframes_the_task_and_releases_the_waiting_work(desk, alice):
    escalation = desk.escalate()
    response = answer(signed_in(alice), escalation, text="Use the loyalty_points threshold")
    assert response.status_code == 200
    page = response.content.decode()
    # Its dependants wait on plan itself, which must run again: only plan is ready.
    assert "Answered by alice — released 1 task</h2>" in page
    assert "<li>plan</li></ul>" in page

    escalation.refresh_from_db()
    assert escalation.status == "answered" and escalation.acted_at is not None
    saved = Answer.objects.get(escalation=escalation)
    assert (saved.reviewer.username, saved.text) == ("alice", "Use the loyalty_points threshold")
    assert saved.released == ["plan"]

    claim = Claim.objects.get(key=f"answer.escalation-{escalation.pk}")
    assert (claim.status, claim.checked_by) == ("verified", "reviewer:alice")
    evidence = Evidence.objects.get(claim=claim)
    assert (evidence.kind, evidence.source, evidence.verdict) == (
        "human_answer",
        "reviewer:alice",
        "verified",
    )

    task = Task.objects.get(key="plan")
    assert task.state == "pending" and task.ready  # the recompute ran after the commit
    decision = Decision.objects.get(task=task, action="reframe")
    assert decision.ground_truth[0] | {} == {
        "kind": "human_answer",
        "source": "reviewer:alice",
        "question": QUESTION,
        "answer": "Use the loyalty_points threshold",
        "claim": claim.key,
        "escalation": escalation.pk,
        "payload_hash": evidence.payload_hash,
    }
    assert not Blocker.objects.filter(code=f"escalation:{escalation.pk}", cleared_at=None).exists()

    reframed = Delivery.objects.get(type="task.reframed")
    assert reframed.payload["data"]["task"] == "plan"
    assert (
        reframed.payload["data"]["ground_truth"][-1]["answer"] == "Use the loyalty_points threshold"
    )
    answered = Delivery.objects.get(type="escalation.answered")
    assert answered.payload["data"]["released"] == ["plan"]


@pytest.mark.parametrize(
    "text", ["Use the loyalty_points threshold", "Use the loyalty_points threshold.  "]
)
def test_the_decision_quotes_the_answer_as_one_sentence(desk, alice, text):
    escalation = desk.escalate()
    answer(signed_in(alice), escalation, text=text)
    reason = Decision.objects.get(task__key="plan", action="reframe").reason
    assert ": Use the loyalty_points threshold. The next attempt gets the answer" in reason


def test_the_agents_next_context_carries_the_answer_as_ground_truth(client, desk, alice):
    escalation = desk.escalate()
    answer(signed_in(alice), escalation, text="loyalty_points >= 1000 is gold")
    _, token = ApiToken.issue(desk.planner.agent)
    context = client.get(
        "/api/v1/runs/tier-discounts/tasks/plan/context", HTTP_AUTHORIZATION=f"Bearer {token}"
    ).json()
    assert context["state"] == "pending" and context["decision"] == "reframe"
    assert context["ground_truth"][-1]["kind"] == "human_answer"
    assert context["ground_truth"][-1]["answer"] == "loyalty_points >= 1000 is gold"
    assert context["ground_truth"][-1]["source"] == "reviewer:alice"
    # Its next attempt is marked as the reframed one.
    desk.planner.post(
        "task.started",
        {
            "run": "tier-discounts",
            "task": "plan",
            "agent": "planner",
            "attempt": {"prompt_hash": "p2", "context_hash": "c2"},
        },
    )
    assert Task.objects.get(key="plan").attempts.get(number=2).reframed


def test_without_htmx_the_answer_redirects_to_the_packet_which_says_who_answered(desk, alice):
    escalation = desk.escalate()
    browser = signed_in(alice)
    with TestCase.captureOnCommitCallbacks(execute=True):
        response = browser.post(f"/escalations/{escalation.pk}/answer/", {"text": "loyalty"})
    assert response.status_code == 302 and response["Location"] == f"/escalations/{escalation.pk}/"
    page = browser.get(response["Location"]).content.decode()
    assert "Answered by alice at" in page and "released 1 task</h2>" in page
    assert 'id="answer-form"' not in page


def test_choosing_an_option_is_an_answer(desk, alice):
    escalation = desk.escalate(options=OPTIONS)
    response = answer(signed_in(alice), escalation, option=OPTIONS[1])
    assert response.status_code == 200
    saved = Answer.objects.get(escalation=escalation)
    assert (saved.option, saved.text) == (OPTIONS[1], OPTIONS[1])
    desk.run("second", tasks=[{"key": "schema", "agent": "coder"}])
    both = desk.escalate("schema", run="second", options=OPTIONS)
    answer(signed_in(alice), both, option=OPTIONS[0], text="name it customer_tier")
    assert Answer.objects.get(escalation=both).text == f"{OPTIONS[0]}: name it customer_tier"
    desk.run("third", tasks=[{"key": "again", "agent": "coder"}])
    same = desk.escalate("again", run="third", options=OPTIONS)
    answer(signed_in(alice), same, option=OPTIONS[0], text=OPTIONS[0])
    assert Answer.objects.get(escalation=same).text == OPTIONS[0]  # not "X: X"


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"text": "  "}, "Write the answer (or choose an option) before releasing."),
        (
            {"option": "Something the agent never offered"},
            "Choose one of the packet&#x27;s options",
        ),
        ({"text": "x" * 5001}, "it may have at most 5,000"),
    ],
)
def test_a_bad_answer_is_refused_and_the_draft_kept(desk, alice, form, message):
    escalation = desk.escalate(options=OPTIONS)
    response = answer(signed_in(alice), escalation, **form)
    assert response.status_code == 422
    page = response.content.decode()
    assert message in page and 'id="answer-form"' in page
    if form.get("text", "").strip():
        assert form["text"] in page
    assert not Answer.objects.exists()


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"text": ""}, "Write the answer before releasing."),
        ({"option": "Yes"}, "This packet offers no options: write the answer."),
    ],
)
def test_a_packet_without_options_asks_only_for_the_answer(desk, alice, form, message):
    escalation = desk.escalate()
    response = answer(signed_in(alice), escalation, **form)
    assert response.status_code == 422
    assert message in response.content.decode()
    assert not Answer.objects.exists()
    assert Task.objects.get(key="plan").state == "escalated"


def test_a_second_answer_is_told_who_answered_and_when(desk, alice, bob):
    escalation = desk.escalate()
    answer(signed_in(alice), escalation, text="loyalty points")
    response = answer(signed_in(bob), escalation, text="add a column")
    assert response.status_code == 409
    page = response.content.decode()
    assert "Answered by alice at" in page and "UTC" in page
    assert "Your answer was not recorded" in page and "add a column" in page
    assert Answer.objects.get().reviewer.username == "alice"
    assert Decision.objects.filter(action="reframe").count() == 1


def test_an_escalation_claimed_by_someone_else_cannot_be_answered(desk, alice, bob):
    escalation = desk.escalate()
    signed_in(bob).post(f"/escalations/{escalation.pk}/claim/")
    response = answer(signed_in(alice), escalation, text="loyalty points")
    assert response.status_code == 409
    assert "Claimed by bob until" in response.content.decode()
    assert not Answer.objects.exists()


def test_an_answer_cannot_release_work_of_a_failed_run(desk, alice):
    desk.run("two", tasks=[{"key": "plan", "agent": "planner"}, {"key": "docs", "agent": "coder"}])
    escalation = desk.escalate(run="two")
    second = desk.escalate("docs", run="two")
    browser = signed_in(alice)
    with TestCase.captureOnCommitCallbacks(execute=True):
        browser.post(f"/escalations/{second.pk}/abort/", {"reason": "dropped"})
    escalation.refresh_from_db()
    assert escalation.status == "closed"  # the run failed: nothing of it waits for a person
    response = answer(browser, escalation, text="loyalty")
    assert response.status_code == 409
    assert "Closed: run two failed when alice aborted docs" in response.content.decode()


def test_a_task_still_blocked_for_another_reason_is_not_counted_as_released(desk, alice):
    desk.run("forge-work", tasks=[{"key": "push", "agent": "coder", "capabilities": ["forge"]}])
    escalation = desk.escalate("push", run="forge-work")
    desk.planner.post(
        "capability.changed", {"capability": "forge", "status": "down", "reason": "503s"}
    )
    promise = signed_in(alice).get(f"/escalations/{escalation.pk}/").content.decode()
    assert "Nothing at once: push would still wait on something else." in promise
    response = answer(signed_in(alice), escalation, text="push to the mirror")
    assert Answer.objects.get().released == []
    page = response.content.decode()
    assert "released 0 tasks" in page
    assert "push is back with its agent and still waits on: capability:forge" in page
    assert "Nothing was ready at once." in page


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_story_1s_answer_releases_what_its_packet_promised(tmp_path):
    """The all-green replay: the packet promises the planner and the two coders whose claim the
    answer replaces; api-tests still waits on api-change, so it is neither promised nor released."""
    from fleet import intake
    from fleet.stories import all_green, play
    from tests.acceptance.conftest import fleet_for

    fleet = fleet_for(all_green.STORY)
    all_green.build_orders(tmp_path / "orders.sqlite3")
    fleet_services.source_add(
        fleet=fleet, kind="datasource", name="orders", value=str(tmp_path / "orders.sqlite3")
    )
    play(fleet, all_green.STORY, transport=intake_inline(intake))  # eager: decided inline
    escalation = Escalation.objects.get(task__key="plan", status="open")
    browser = signed_in(member("alice", fleet))
    promise = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    assert "it releases 3 tasks: plan, api-change, discount-resolver." in promise

    with TestCase.captureOnCommitCallbacks(execute=True):
        response = browser.post(
            f"/escalations/{escalation.pk}/answer/",
            {"option": all_green.ANSWER},
            HTTP_HX_REQUEST="true",
        )
    page = response.content.decode()
    assert "Answered by alice — released 3 tasks</h2>" in page
    released = Answer.objects.get(escalation=escalation).released
    assert released == ["plan", "api-change", "discount-resolver"]
    tests = Task.objects.get(run__key=all_green.RUN, key="api-tests")
    assert not tests.ready
    assert list(tests.blockers.filter(cleared_at=None).values_list("code", flat=True)) == [
        "prerequisite:api-change"
    ]


def intake_inline(intake):
    def transport(agent_id, headers, body):
        return intake.receive(
            agent_id=agent_id, headers=headers, body=body, content_type="application/json"
        )

    return transport


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_reviewers_answering_at_once_keep_exactly_one_answer(client, fleet):
    fleet.callback_url = (
        "http://127.0.0.1:9/bulkhead"  # refused at once: nothing leaves the machine
    )
    fleet.save()
    desk = Desk(client, fleet)
    desk.run()
    escalation = desk.escalate()
    people = [member("alice", fleet), member("bob", fleet)]
    barrier = threading.Barrier(2)
    responses = {}

    def post(user):
        browser = signed_in(user)
        barrier.wait()
        try:
            responses[user.username] = browser.post(
                f"/escalations/{escalation.pk}/answer/",
                {"text": f"{user.username} says loyalty points"},
                HTTP_HX_REQUEST="true",
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=post, args=(user,)) for user in people]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    statuses = sorted(r.status_code for r in responses.values())
    assert statuses == [200, 409], statuses
    winner = Answer.objects.get(escalation=escalation).reviewer.username
    loser = next(name for name in responses if name != winner)
    assert f"Answered by {winner} — released" in responses[winner].content.decode()
    assert f"Answered by {winner} at" in responses[loser].content.decode()
    assert Decision.objects.filter(action="reframe").count() == 1
    assert Claim.objects.filter(key=f"answer.escalation-{escalation.pk}").count() == 1
    assert Delivery.objects.filter(type="escalation.answered").count() == 1
    assert Escalation.objects.get(pk=escalation.pk).claimed_by.username == winner


def at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Each call in its own thread (and database connection), all let go at the same moment."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = calls[i]()
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def reviewer_posts(reviewer: Any, url: str, form: dict[str, str]) -> Any:
    return signed_in(reviewer).post(url, form, HTTP_HX_REQUEST="true")


def agent_posts(sender: Any, type: str, data: dict[str, Any]) -> Any:
    body = sender.body(type, data)
    extra = wsgi_headers(sender.headers(body))
    return Client().generic("POST", sender.path, body, content_type="application/json", **extra)


RACING = {
    "answer": ({"text": "Use loyalty points"}, {200, 409}),
    "return": ({"field": "tried", "note": "say which query you ran"}, {200, 409}),
}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("action", sorted(RACING))
def test_a_reviewer_racing_the_agents_new_packet_is_applied_or_refused_never_a_503(
    client, fleet, action
):
    """The reviewer answers (or returns) the packet on the page while the agent sends another
    question for the same task: one of them goes first, the other is applied after it or refused
    as it would be one after the other. The two locked the run and the task in opposite orders,
    and PostgreSQL broke the deadlock with the reviewer's side: a 503 saying the database was
    down."""
    from tests.escalations.desk import packet

    fleet.callback_url = REFUSED_CALLBACK
    fleet.save()
    desk = Desk(client, fleet)
    reviewer = member("alice", fleet)
    form, allowed = RACING[action]
    for trial in range(6):
        run = f"race-{trial}"
        desk.run(run, [{"key": "plan", "agent": "planner"}])
        escalation = desk.escalate(run=run)
        new = packet("plan", smallest_unblocking_question=f"Which source decides trial {trial}?")
        url = f"/escalations/{escalation.pk}/{action}/"
        data = {"run": run, "task": "plan", "packet": new}
        acted, sent = at_once(
            partial(reviewer_posts, reviewer, url, {**form, "packet": str(escalation.packet_id)}),
            partial(agent_posts, desk.planner, "packet.submitted", data),
        )
        assert acted.status_code in allowed, (trial, acted.status_code, acted.content)
        assert sent.status_code == 202, (trial, sent.content)
        if action == "answer":
            kept = Answer.objects.filter(escalation=escalation).exists()
            assert kept == (acted.status_code == 200)
            if not kept:
                assert sent.json()["packet"] == "replaced"
                shown = acted.content.decode()
                assert "The agent sent a new packet since this page was opened" in shown


def test_an_answer_the_database_rolled_back_to_break_a_deadlock_is_taken_again(
    desk, alice, monkeypatch
):
    """Rolled back by PostgreSQL to break a deadlock, nothing of the answer was written: it is
    taken again, and the reviewer sees it answered, not the database down."""
    from psycopg.errors import DeadlockDetected

    from escalations.services import answer as service

    escalation = desk.escalate()
    locking, calls = service.locked_for_answer, []

    def deadlocked_once(escalation_id):
        calls.append(escalation_id)
        if len(calls) == 1:
            raise OperationalError("deadlock detected") from DeadlockDetected("deadlock detected")
        return locking(escalation_id)

    monkeypatch.setattr(service, "locked_for_answer", deadlocked_once)
    response = answer(signed_in(alice), escalation, text="Use the loyalty_points threshold")
    assert response.status_code == 200
    assert len(calls) == 2
    assert Answer.objects.filter(escalation=escalation).count() == 1


def test_an_answer_to_a_packet_the_agent_has_replaced_since_is_refused(desk, alice):
    """The reviewer read one question; the agent sent another packet meanwhile: the answer is
    not applied to a question nobody read, and the page shows the new one."""
    from tests.escalations.desk import packet

    escalation = desk.escalate()
    browser = signed_in(alice)
    page = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    read = f'<input type="hidden" name="packet" value="{escalation.packet_id}">'
    assert read in page
    new = "Should we delete the production pricing table instead?"
    replaced = desk.planner.post(
        "packet.submitted",
        {"run": "tier-discounts", "task": "plan", "agent": desk.agent_of("tier-discounts", "plan"),
         "packet": packet("plan", smallest_unblocking_question=new)},
    )  # fmt: skip
    assert replaced.status_code == 202 and replaced.json()["packet"] == "replaced"

    response = answer(browser, escalation, text="Yes", packet=str(escalation.packet_id))

    assert response.status_code == 409
    shown = response.content.decode()
    assert "The agent sent a new packet since this page was opened" in shown
    assert new in shown and 'name="text"' in shown and ">Yes</textarea>" in shown
    assert not Answer.objects.filter(escalation=escalation).exists()
    assert Task.objects.get(key="plan").state == "escalated"
    escalation.refresh_from_db()
    current = str(escalation.packet_id)
    assert f'name="packet" value="{current}"' in shown  # answering now answers the new one
    assert answer(browser, escalation, text="No", packet=current).status_code == 200
    assert Answer.objects.get(escalation=escalation).text == "No"


@pytest.mark.parametrize("packet", ["not-a-number", "²", "9" * 30])
def test_a_packet_field_that_names_no_packet_is_refused_naming_it(desk, alice, packet):
    escalation = desk.escalate()
    response = answer(signed_in(alice), escalation, text="Yes", packet=packet)
    assert response.status_code == 422  # "²" (a digit to isdigit) and 30 digits were 500s
    shown = response.content.decode()
    assert "The form&#x27;s packet field is not a packet&#x27;s id" in shown
    assert "new packet since" not in shown and ">Yes</textarea>" in shown
    assert not Answer.objects.filter(escalation=escalation).exists()


@pytest.mark.parametrize(
    ("action", "field"),
    [("answer", "text"), ("abort", "reason"), ("return", "note"), ("reroute", "note")],
)
def test_a_nul_byte_in_a_form_is_a_400_and_changes_nothing(desk, alice, action, field):
    escalation = desk.escalate()
    browser = signed_in(alice)
    response = browser.post(f"/escalations/{escalation.pk}/{action}/", {field: "a\x00b"})
    assert response.status_code == 400
    assert "holds a NUL byte" in response.content.decode()
    escalation.refresh_from_db()
    assert escalation.status == "open"
    htmx = browser.post(
        f"/escalations/{escalation.pk}/{action}/", {field: "a\x00b"}, HTTP_HX_REQUEST="true"
    )
    assert htmx.status_code == 400 and htmx["HX-Reswap"] == "none"
