"""The reviewer's actions in a real browser: after an answer or an abort the whole packet shows
the new state; a claim verified by hand and a stop released from the run page; a manager reads
without the actions. Elements are found by role and accessible name."""

import pytest

from escalations.models import Escalation
from runs.models import Claim, Run, Task
from tests.browser.conftest import expect
from tests.conftest import eventually
from tests.escalations.desk import Desk, member

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple"


@pytest.fixture
def desk(desk, alice):
    """The desk, with alice (a reviewer) at it."""
    return desk


def test_after_answering_the_whole_packet_shows_the_new_state(desk, screens):
    escalation = desk.escalate()
    alice = screens()
    page = alice.page
    alice.sign_in("alice", PASSWORD)
    page.goto(f"/escalations/{escalation.pk}/")
    page.get_by_role("button", name="Claim it").click()
    expect()(page.get_by_text("You have claimed it until")).to_be_visible()
    page.get_by_role("textbox", name="Answer", exact=True).fill("Use the loyalty_points threshold")
    page.get_by_role("button", name="Answer and release").click()

    outcome = page.get_by_role("heading", name="Answered by alice — released 1 task")
    expect()(outcome).to_be_focused()
    expect()(page.get_by_text("You have claimed it until")).to_have_count(0)
    expect()(page.get_by_role("heading", name="Released", exact=True)).to_be_visible()
    expect()(page.get_by_role("heading", name="This answer will release")).to_have_count(0)
    history = page.get_by_role("region", name="History")
    expect()(history).to_contain_text(f"escalation {escalation.pk} answered by alice")
    for gone in ("Answer and release", "Reroute", "Return the packet", "Abort the task"):
        expect()(page.get_by_role("button", name=gone)).to_have_count(0)
    expect()(page.get_by_role("heading", name="Other actions")).to_have_count(0)
    alice.shot("10-answered-whole-packet")
    assert alice.problems == []


def test_aborting_warns_first_then_says_what_it_did(desk, screens):
    desk.run("two", tasks=[{"key": "plan", "agent": "planner"}, {"key": "docs", "agent": "coder"}])
    escalation = desk.escalate(run="two")
    other = desk.escalate("docs", run="two")
    alice = screens()
    page = alice.page
    alice.sign_in("alice", PASSWORD)
    page.goto(f"/escalations/{escalation.pk}/")
    page.locator("summary").filter(has_text="Abort the task").click()
    reason = page.get_by_role("textbox", name="Why abort")
    expect()(reason).to_have_accessible_description(
        "This fails run two: 1 other escalation waiting in it will be closed (docs) and 1 task "
        "cancelled (plan). Your reason becomes the run's failure cause."
    )
    alice.shot("11-abort-warning")
    reason.fill("the discount was dropped")
    page.get_by_role("button", name="Abort the task").click()
    expect()(
        page.get_by_role(
            "heading", name="Aborted by alice: the discount was dropped; the run failed"
        )
    ).to_be_focused()
    expect()(
        page.get_by_text(f"Closed with it: escalation {other.pk} (docs)", exact=True)
    ).to_be_visible()
    page.goto(f"/escalations/{other.pk}/")
    expect()(
        page.get_by_role("heading", name="Closed: run two failed when alice aborted plan")
    ).to_be_visible()
    alice.shot("12-closed-by-the-abort")
    assert Run.objects.get(key="two").state == "failed"
    assert Escalation.objects.get(pk=other.pk).status == "closed"
    assert alice.problems == []


def test_a_claim_verified_by_hand_on_the_run_page_releases_its_consumer(client, fleet, screens):
    desk = Desk(client, fleet)
    desk.run(
        "r",
        tasks=[
            {"key": "plan", "agent": "planner"},
            {
                "key": "build",
                "agent": "coder",
                "prerequisites": ["plan"],
                "consumes": ["plan.tier"],
            },
        ],
    )
    desk.planner.post(
        "task.started",
        {"run": "r", "task": "plan", "attempt": {"prompt_hash": "p", "context_hash": "c"}},
    )
    desk.planner.post(
        "claim.posted",
        {"run": "r", "task": "plan", "claim": {"key": "plan.tier", "statement": "tier exists"}},
    )
    desk.planner.post("task.finished", {"run": "r", "task": "plan", "outcome": "succeeded"})
    member("alice", fleet)
    alice = screens()
    page = alice.page
    alice.sign_in("alice", PASSWORD)
    page.goto(f"/runs/{Run.objects.get(key='r').pk}/")
    claims = page.get_by_role("region", name="Claims")
    row = claims.get_by_role("row", name="plan.tier")
    row.get_by_text("Verify or refute").click()
    row.get_by_role("radio", name="Verified").check()
    row.get_by_role("textbox", name="What you checked").fill("SELECT tier FROM customers: 2 rows")
    alice.shot("13-verify-by-hand")
    row.get_by_role("button", name="Record the verdict on plan.tier").click()
    expect()(claims.get_by_role("row", name="plan.tier")).to_contain_text(
        "verified by hand by alice: SELECT tier FROM customers: 2 rows"
    )
    eventually(lambda: Task.objects.get(key="build").ready)
    assert Claim.objects.get(key="plan.tier").checked_by == "reviewer:alice"
    assert alice.problems == []


def test_a_stop_is_released_from_the_run_page(client, fleet, screens):
    desk = Desk(client, fleet)
    desk.run("deploy", tasks=[{"key": "publish", "agent": "coder", "effect": "external",
                               "dependency_confidence": "uncertain"}])  # fmt: skip
    member("alice", fleet)
    alice = screens()
    page = alice.page
    alice.sign_in("alice", PASSWORD)
    page.goto(f"/runs/{Run.objects.get(key='deploy').pk}/")
    tasks = page.get_by_role("region", name="Tasks")
    row = tasks.get_by_role("row", name="publish")
    expect()(row).to_contain_text("barrier:uncertain-dependency")
    row.get_by_role("button", name="Release the stop of publish").click()
    row = tasks.get_by_role("row", name="publish")
    expect()(row).to_contain_text("uncertain-dependency stop released")
    expect()(row.get_by_role("button", name="Release the stop of publish")).to_have_count(0)
    expect()(page.get_by_role("region", name="Progress")).to_contain_text(
        "publish: alice released its uncertain-dependency stop"
    )
    alice.shot("14-stop-released")
    eventually(lambda: Task.objects.get(key="publish").ready)
    assert alice.problems == []


def test_a_manager_reads_the_packet_without_the_actions(desk, fleet, screens):
    escalation = desk.escalate()
    member("carol", fleet, role="manager")
    carol = screens()
    page = carol.page
    carol.sign_in("carol", PASSWORD)
    page.goto(f"/escalations/{escalation.pk}/")
    expect()(page.get_by_text("You are a manager of fleet acme")).to_be_visible()
    for action in ("Answer and release", "Claim it", "Abort the task"):
        expect()(page.get_by_role("button", name=action)).to_have_count(0)
    expect()(page.get_by_role("textbox", name="Answer", exact=True)).to_have_count(0)
    carol.shot("15-manager-packet")
    assert carol.problems == []


def test_an_answer_refused_for_its_security_token_keeps_what_was_typed(desk, screens):
    escalation = desk.escalate()
    alice = screens()
    page = alice.page
    alice.sign_in("alice", PASSWORD)
    page.goto(f"/escalations/{escalation.pk}/")
    answer = page.get_by_role("textbox", name="Answer", exact=True)
    answer.fill("Use the loyalty_points threshold")
    alice.context.clear_cookies(name="csrftoken")  # as a browser that dropped the cookie
    page.get_by_role("button", name="Answer and release").click()

    expect()(
        page.get_by_role("alert").filter(has_text="security token has expired")
    ).to_be_visible()
    expect()(answer).to_have_value("Use the loyalty_points threshold")
    expect()(page.get_by_role("button", name="Sign out")).to_have_count(1)  # no page in a page
    expect()(page.get_by_role("heading", name="This form has expired")).to_have_count(0)
    assert Escalation.objects.get(pk=escalation.pk).status == "open"
    assert all("403" in problem for problem in alice.problems), alice.problems


def test_an_answer_over_the_limit_is_refused_whole_not_cut_by_the_browser(desk, screens):
    """Pasted text is never cut silently: the server names the limit and the whole text stays."""
    escalation = desk.escalate()
    alice = screens()
    page = alice.page
    alice.sign_in("alice", PASSWORD)
    page.goto(f"/escalations/{escalation.pk}/")
    answer = page.get_by_role("textbox", name="Answer", exact=True)
    long = "Use the loyalty_points threshold. " * 300 + "END-MARKER"
    answer.fill(long)
    expect()(answer).to_have_value(long)
    page.get_by_role("button", name="Answer and release").click()

    expect()(
        page.get_by_role("alert").filter(has_text=f"The answer is {len(long):,} characters")
    ).to_be_visible()
    expect()(page.get_by_role("textbox", name="Answer", exact=True)).to_have_value(long)
    assert Escalation.objects.get(pk=escalation.pk).status == "open"
    assert all("422" in problem for problem in alice.problems), alice.problems
