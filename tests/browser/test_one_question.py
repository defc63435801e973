"""One question, one answer, in Chromium: three agents stop on the same question; the queue
shows one escalation with three tasks waiting; one answer releases all three, each agent told."""

import pytest

from escalations.models import Escalation, JoinedTask
from runs.models import Task
from tests.browser.conftest import expect
from tests.conftest import eventually
from tests.escalations.desk import QUESTION, member

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple"
RUNS = (("orders", "planner"), ("billing", "coder"), ("invoices", "coder-b"))


@pytest.fixture
def desk_callback_url(receiver):
    return receiver.url


def test_three_agents_one_question_one_answer_releases_all_three(desk, worker, screens, receiver):
    for run, agent in RUNS:
        desk.run(run, [{"key": "tiers", "agent": agent}])
    # The same question, typed three ways.
    for (run, _), question in zip(
        RUNS, (QUESTION, QUESTION.lower(), QUESTION.replace(":", " —")), strict=True
    ):
        desk.escalate("tiers", run=run, smallest_unblocking_question=question)
    assert Escalation.objects.count() == 1 and JoinedTask.objects.count() == 2
    member("alice", desk.fleet)
    alice = screens()
    page = alice.page
    alice.sign_in("alice", PASSWORD)

    expect()(page.locator("#queue-count")).to_have_text("3 tasks waiting on 1 escalation")
    expect()(page.locator("#queue tbody tr")).to_have_count(1)
    expect()(page.locator("#queue tbody tr")).to_contain_text("+2 tasks")
    alice.shot("one-question-queue")

    page.get_by_role("link", name=QUESTION).click()
    waiting = page.get_by_role("heading", name="3 tasks wait on this question")
    expect()(waiting).to_be_visible()
    for run, agent in RUNS:
        expect()(page.locator("table.waiting")).to_contain_text(run)
        expect()(page.locator("table.waiting")).to_contain_text(agent)
    alice.shot("one-question-packet")
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        alice.shot(f"one-question-packet-{width}")
        # On a phone each waiting task is a card, its Split off button on screen.
        split = page.get_by_role("button", name="Split off invoices tiers")
        box = split.bounding_box()
        assert box is not None and box["x"] + box["width"] <= width
        page.locator("section.waiting-tasks").screenshot(
            path=str(
                alice.shot(f"one-question-packet-{width}").with_name(
                    f"one-question-waiting-{width}.png"
                )
            )
        )
    page.set_viewport_size({"width": 1280, "height": 900})

    page.get_by_role("textbox", name="Answer", exact=True).fill("Use the loyalty_points threshold")
    page.get_by_role("button", name="Answer and release").click()
    expect()(
        page.get_by_role("heading", name="Answered by alice — released 3 tasks")
    ).to_be_visible()
    expect()(page.locator("ul.released").first).to_contain_text("billing/tiers")
    alice.shot("one-question-answered")

    for run, _ in RUNS:
        eventually(lambda run=run: Task.objects.get(run__key=run, key="tiers").ready)
    reframed = eventually(lambda: len(receiver.of_type("task.reframed")) == 3 or None)
    assert reframed
    told = {n["data"]["run"]: n["data"] for n in receiver.of_type("task.reframed")}
    assert set(told) == {run for run, _ in RUNS}
    assert all(
        d["ground_truth"][-1]["answer"] == "Use the loyalty_points threshold" for d in told.values()
    )
    assert alice.problems == []
