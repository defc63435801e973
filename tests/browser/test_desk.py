"""The desk in a real browser (Debian's Chromium) against the live server, with a real worker:
sign in, find the oldest escalation, answer it, see the release and the agent's next context."""

import time
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from escalations.models import Escalation
from fleet.models import ApiToken
from runs.models import Task
from tests.browser.conftest import expect
from tests.conftest import eventually
from tests.escalations.desk import QUESTION, member

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple"


@pytest.fixture
def desk_callback_url(receiver):
    return receiver.url


def test_a_reviewer_answers_the_oldest_escalation_and_the_work_is_released(
    desk, worker, screens, receiver, live_server
):
    desk.run("later", tasks=[{"key": "docs", "agent": "coder"}])
    oldest = desk.escalate()
    newer = desk.escalate("docs", run="later", smallest_unblocking_question="Which changelog?")
    Escalation.objects.filter(pk=oldest.pk).update(opened_at=timezone.now() - timedelta(minutes=30))
    Escalation.objects.filter(pk=newer.pk).update(opened_at=timezone.now() - timedelta(minutes=3))
    member("alice", desk.fleet)
    alice = screens()
    page = alice.page
    started = time.monotonic()

    alice.sign_in("alice", PASSWORD)
    expect()(page.get_by_role("heading", name="Escalation queue")).to_be_visible()
    rows = page.locator("#queue tbody tr")
    expect()(rows).to_have_count(2)
    expect()(rows.first).to_contain_text("tier-discounts")  # oldest first
    alice.shot("01-queue")

    rows.first.get_by_role("link", name=QUESTION).click()
    expect()(page.get_by_role("heading", level=1)).to_have_text(QUESTION)
    expect()(page.get_by_role("button", name="Answer and release")).to_be_visible()
    alice.shot("02-packet")

    page.get_by_role("textbox", name="Answer", exact=True).fill(
        "Use the loyalty_points threshold in pricing-config.yaml"
    )
    page.get_by_role("button", name="Answer and release").click()
    # The coders wait for the reframed plan to run again: only plan is released now.
    outcome = page.get_by_role("heading", name="Answered by alice — released 1 task")
    expect()(outcome).to_be_visible()
    expect()(page.locator("ul.released")).to_have_text("plan")
    elapsed = time.monotonic() - started
    alice.shot("03-answered")
    assert elapsed < 60, f"signing in and answering took {elapsed:.1f}s"

    # The worker recomputes the frontier after the commit and delivers the notifications.
    eventually(lambda: Task.objects.get(run__key="tier-discounts", key="plan").ready)
    reframed = eventually(lambda: receiver.of_type("task.reframed"))
    assert reframed[0]["data"]["ground_truth"][-1]["answer"].startswith("Use the loyalty_points")
    assert eventually(lambda: receiver.of_type("escalation.answered"))
    _, token = ApiToken.issue(desk.planner.agent)
    context = httpx.get(
        f"{live_server.url}/api/v1/runs/tier-discounts/tasks/plan/context",
        headers={"Authorization": f"Bearer {token}"},
    ).json()
    assert context["decision"] == "reframe"
    assert context["ground_truth"][-1]["source"] == "reviewer:alice"
    assert context["ground_truth"][-1]["question"] == QUESTION

    page.get_by_role("link", name="See the run").click()
    expect()(page.get_by_role("heading", level=1)).to_contain_text("Run tier-discounts")
    expect()(page.locator("#graph[data-drawn='3']")).to_be_attached()
    alice.shot("04-run")
    assert alice.problems == []


def test_the_queue_is_driven_from_the_keyboard(desk, worker, screens):
    desk.run("two", tasks=[{"key": "a", "agent": "coder"}, {"key": "b", "agent": "coder-b"}])
    first = desk.escalate()
    second = desk.escalate("a", run="two", smallest_unblocking_question="Which remote for a?")
    third = desk.escalate("b", run="two", smallest_unblocking_question="Which remote for b?")
    for minutes, escalation in ((30, first), (20, second), (1, third)):
        Escalation.objects.filter(pk=escalation.pk).update(
            opened_at=timezone.now() - timedelta(minutes=minutes)
        )
    member("alice", desk.fleet)
    alice = screens()
    page = alice.page
    alice.sign_in("alice", PASSWORD)
    rows = page.locator("#queue tbody tr")
    expect()(rows).to_have_count(3)

    page.keyboard.press("j")
    expect()(rows.nth(0)).to_have_attribute("aria-current", "true")
    page.keyboard.press("j")
    page.keyboard.press("j")
    expect()(rows.nth(2)).to_have_attribute("aria-current", "true")
    page.keyboard.press("k")
    expect()(rows.nth(1)).to_have_attribute("aria-current", "true")

    page.keyboard.press("c")  # claims the selected one, in place
    expect()(rows.nth(1)).to_contain_text("alice")
    expect()(rows.nth(1).get_by_role("button", name="Release")).to_be_visible()
    # Polling swaps the queue in again; the selection and the focus stay where they were.
    page.locator("#queue").evaluate("queue => { queue.dataset.beforePoll = 'yes' }")
    page.wait_for_function(
        "() => !document.querySelector('#queue[data-before-poll]')", timeout=10_000
    )
    expect()(rows.nth(1)).to_have_attribute("aria-current", "true")
    expect()(rows.nth(1).locator("a.open")).to_be_focused()

    page.keyboard.press("?")
    help_dialog = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect()(help_dialog).to_be_visible()
    alice.shot("05-keyboard-help")
    page.keyboard.press("Escape")
    expect()(help_dialog).to_be_hidden()

    page.keyboard.press("k")
    page.keyboard.press("Enter")
    expect()(page.get_by_role("heading", level=1)).to_have_text(QUESTION)
    assert alice.problems == []


def test_a_second_reviewer_answering_the_same_escalation_sees_who_won(desk, worker, screens):
    escalation = desk.escalate()
    member("alice", desk.fleet)
    member("bob", desk.fleet)
    alice, bob = screens(), screens()
    for screen, name in ((alice, "alice"), (bob, "bob")):
        screen.sign_in(name, PASSWORD)
        screen.page.goto(f"/escalations/{escalation.pk}/")
        screen.page.get_by_role("textbox", name="Answer", exact=True).fill(
            f"{name}: use loyalty points"
        )

    alice.page.get_by_role("button", name="Answer and release").click()
    expect()(
        alice.page.get_by_role("heading", name="Answered by alice — released 1 task")
    ).to_be_visible()

    # Bob's page learns it from its poll, and his own answer is refused naming the winner.
    expect()(bob.page.locator("#status")).to_contain_text("Answered by alice at", timeout=10_000)
    bob.page.get_by_role("button", name="Answer and release").click()
    lost = bob.page.get_by_role("heading", name="Answered by alice at")
    expect()(lost).to_be_visible()
    expect()(bob.page.get_by_text("Your answer was not recorded")).to_be_visible()
    bob.shot("06-second-reviewer")
    assert Escalation.objects.get(pk=escalation.pk).answer.reviewer.username == "alice"
    assert alice.problems == [] and bob.problems == []


def test_capabilities_board_reports_and_the_sign_in_page(client, fleet, worker, screens):
    import io

    from django.core.management import call_command

    from tests.fixtures.seed import ALL_GREEN_RUN, phoenixdx

    seed = phoenixdx(client, fleet)
    call_command("import_events", fleet.name, str(ALL_GREEN_RUN), stdout=io.StringIO())
    seed.planner.post(
        "capability.changed", {"capability": "forge", "status": "down", "reason": "forge 503s"}
    )
    member("carol", fleet, role="manager")
    carol = screens()
    carol.page.goto("/login/")
    carol.shot("00-sign-in")
    carol.sign_in("carol", PASSWORD)
    carol.page.get_by_role("link", name="Capabilities").click()
    expect()(carol.page.get_by_role("heading", name="Capabilities")).to_be_visible()
    expect()(carol.page.get_by_role("button", name="Mark forge up")).to_be_visible()
    carol.shot("07-capabilities")
    carol.page.get_by_role("link", name="Reports").click()
    carol.page.get_by_label("Window").select_option("all")
    carol.page.get_by_role("button", name="Show").click()
    expect()(carol.page.get_by_role("heading", name="Escalation health")).to_be_visible()
    expect()(carol.page.locator("#blast-chart[data-drawn='1']")).to_be_attached()
    runs = carol.page.get_by_role("row", name="tier-discounts")
    expect()(runs).to_contain_text("plan.customer-tier")
    carol.shot("08-reports")
    assert carol.problems == []
