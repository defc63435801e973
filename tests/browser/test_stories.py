"""The demo's three stories in a real browser: each story's key screen, and story 1's answer.

The screenshots these tests take are the README's walkthrough (docs/walkthrough.md).
"""

import pytest
from django.contrib.auth import get_user_model

from escalations.models import Escalation
from fleet import demo
from fleet.models import Delivery
from fleet.stories import all_green, forge_outage, hung_test_run
from runs.models import Run, Task
from tests.browser.conftest import expect
from tests.conftest import eventually

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]
PASSWORD = "correct horse battery staple"


@pytest.fixture
def loaded(settings, tmp_path, worker, live_server):
    settings.VAR_DIR = tmp_path
    settings.SITE_URL = live_server.url  # the demo's callback is this server, as with make run
    demo.load()
    reviewer = get_user_model().objects.get(username="reviewer")
    reviewer.set_password(PASSWORD)
    reviewer.save()
    return {key: pk for key, pk in Run.objects.values_list("key", "pk")}


def test_story_1_the_reviewer_answers_the_planners_question_in_the_browser(loaded, screens):
    screen = screens()
    screen.sign_in("reviewer", PASSWORD)
    page = screen.page
    question = all_green.PACKET["smallest_unblocking_question"]
    expect()(page.get_by_role("link", name=question)).to_be_visible()
    screen.shot("story-1-queue")
    page.get_by_role("link", name=question).click()
    expect()(page.get_by_role("heading", level=1)).to_have_text(question)
    screen.shot("story-1-packet")
    page.get_by_role("radio", name=all_green.ANSWER).check()
    page.get_by_role("button", name="Answer and release").click()
    # What the packet promised: the planner and the two coders; api-tests waits on api-change.
    outcome = page.get_by_role("heading", name="Answered by reviewer — released 3 tasks")
    expect()(outcome).to_be_visible()
    screen.shot("story-1-answered")
    escalation = Escalation.objects.get(run__key=all_green.RUN)
    assert escalation.status == "answered"
    assert escalation.answer.released == ["plan", "api-change", "discount-resolver"]
    eventually(lambda: Task.objects.get(run__key=all_green.RUN, key="discount-resolver").ready)

    page.goto(f"/runs/{loaded[all_green.RUN]}/")
    expect()(page.get_by_role("heading", level=1)).to_contain_text(all_green.RUN)
    screen.shot("story-1-replay-run")
    page.goto(f"/runs/{loaded['tier-discounts']}/")
    expect()(page.get_by_text("40")).not_to_have_count(0)
    screen.shot("story-1-past-run")
    assert not screen.problems, screen.problems


def test_story_2_the_forge_work_waits_and_a_manager_bringing_the_forge_back_releases_it(
    loaded, screens
):
    manager = get_user_model().objects.get(username="manager")
    manager.set_password(PASSWORD)
    manager.save()
    screen = screens()
    screen.sign_in("manager", PASSWORD)
    page = screen.page
    page.goto(f"/runs/{loaded[forge_outage.RUN]}/")
    expect()(page.get_by_role("heading", level=1)).to_contain_text(forge_outage.RUN)
    tasks = page.get_by_role("table").first
    for key in forge_outage.LOCAL:
        expect()(page.locator(f"#task-{key}")).to_contain_text("succeeded")
    expect()(tasks.get_by_text("capability:forge")).to_have_count(len(forge_outage.FORGE))
    screen.shot("story-2-forge-outage-run")

    page.goto("/capabilities/")
    page.get_by_label("Reason").fill("Connection restored")
    page.get_by_role("button", name="Mark forge up").click()
    expect()(page.get_by_role("status")).to_contain_text("forge is now up")
    eventually(
        lambda: Task.objects.filter(
            run__key=forge_outage.RUN, key="forge-authenticate", ready=True
        ).exists()
    )
    page.goto(f"/runs/{loaded[forge_outage.RUN]}/")
    tasks = page.get_by_role("table").first
    expect()(tasks.get_by_text("capability:forge")).to_have_count(0)
    expect()(page.locator("#task-forge-authenticate")).to_contain_text("ready")
    checkpoint = page.get_by_role("region", name="Blockers over time")
    expect()(checkpoint.get_by_text("still set")).to_have_count(0)
    expect()(checkpoint.get_by_text("capability:forge")).to_have_count(len(forge_outage.FORGE))
    screen.shot("story-2-forge-released")
    assert not screen.problems, screen.problems


def test_story_3_the_hung_test_run_shows_its_full_failure_cause(loaded, screens):
    screen = screens()
    screen.sign_in("reviewer", PASSWORD)
    page = screen.page
    # run.failed went to the demo's callback, signed, with the full cause.
    eventually(
        lambda: Delivery.objects.filter(type="run.failed", status="delivered").exists(), timeout=60
    )
    page.goto(f"/runs/{loaded[hung_test_run.RUN]}/")
    cause = (
        "implement session ended with a background task still running (./mvnw test), which was "
        "killed, and a later step failed: no PR found"
    )
    expect()(page.get_by_role("alert").filter(has_text="Failure cause")).to_contain_text(cause)
    expect()(page.get_by_text(hung_test_run.PROGRESS).first).to_be_visible()
    deliveries = page.get_by_role("region", name="Deliveries")
    expect()(deliveries.get_by_role("row").filter(has_text="run.failed")).to_contain_text(cause)
    expect()(deliveries.get_by_role("row").filter(has_text="run.failed")).to_contain_text(
        "delivered"
    )
    screen.shot("story-3-hung-test-run")
    assert not screen.problems, screen.problems
