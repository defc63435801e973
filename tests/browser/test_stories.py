"""The demo's three stories in a real browser: each story's key screen, and story 1's answer.

The screenshots these tests take are the README's walkthrough (docs/walkthrough.md).
"""

import pytest
from django.contrib.auth import get_user_model

from escalations.models import Escalation
from fleet import demo
from fleet.stories import all_green, forge_outage, hung_test_run
from runs.models import Run, Task
from tests.conftest import eventually

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]
PASSWORD = "correct horse battery staple"


def expect():
    from playwright.sync_api import expect

    return expect


@pytest.fixture
def loaded(settings, tmp_path, worker):
    settings.VAR_DIR = tmp_path
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
    outcome = page.get_by_role("heading", name="Answered by reviewer — released")
    expect()(outcome).to_be_visible()
    screen.shot("story-1-answered")
    escalation = Escalation.objects.get(run__key=all_green.RUN)
    assert escalation.status == "answered"
    assert {"plan", "discount-resolver", "api-change"} <= set(escalation.answer.released)
    eventually(lambda: Task.objects.get(run__key=all_green.RUN, key="discount-resolver").ready)

    page.goto(f"/runs/{loaded[all_green.RUN]}/")
    expect()(page.get_by_role("heading", level=1)).to_contain_text(all_green.RUN)
    screen.shot("story-1-replay-run")
    page.goto(f"/runs/{loaded['tier-discounts']}/")
    expect()(page.get_by_text("40")).not_to_have_count(0)
    screen.shot("story-1-past-run")
    assert not screen.problems, screen.problems


def test_story_2_the_forge_outage_run_shows_the_released_forge_work(loaded, screens):
    screen = screens()
    screen.sign_in("reviewer", PASSWORD)
    page = screen.page
    page.goto(f"/runs/{loaded[forge_outage.RUN]}/")
    expect()(page.get_by_role("heading", level=1)).to_contain_text(forge_outage.RUN)
    expect()(page.get_by_text("forge-authenticate").first).to_be_visible()
    screen.shot("story-2-forge-outage-run")
    assert not screen.problems, screen.problems


def test_story_3_the_hung_test_run_shows_its_full_failure_cause(loaded, screens):
    screen = screens()
    screen.sign_in("reviewer", PASSWORD)
    page = screen.page
    page.goto(f"/runs/{loaded[hung_test_run.RUN]}/")
    expect()(page.get_by_text(hung_test_run.CAUSE_PREFIX.strip()[:60]).first).to_be_visible()
    expect()(page.get_by_text(hung_test_run.PROGRESS).first).to_be_visible()
    screen.shot("story-3-hung-test-run")
    assert not screen.problems, screen.problems
