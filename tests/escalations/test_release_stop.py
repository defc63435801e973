"""A reviewer releases a task's uncertain-dependency stop from the run page (DESIGN 5, rule 4):
who and when are kept, and the frontier is recomputed after commit."""

import pytest
from django.test import TestCase

from fleet.models import Delivery
from runs.models import ProgressLine, Run, Task
from tests.conftest import REFUSED_CALLBACK, signed_in
from tests.escalations.desk import Desk, member

pytestmark = pytest.mark.django_db

RUN = "deploy"
STOP = "barrier:uncertain-dependency"


@pytest.fixture
def desk(client, fleet):
    fleet.callback_url = REFUSED_CALLBACK
    fleet.save()
    desk = Desk(client, fleet)
    desk.run(
        RUN,
        tasks=[
            {"key": "build", "agent": "coder"},
            {"key": "publish", "agent": "coder", "effect": "external",
             "dependency_confidence": "uncertain"},
            {"key": "announce", "agent": "coder-b", "prerequisites": ["publish"]},
        ],
    )  # fmt: skip
    return desk


def blockers(key):
    task = Task.objects.get(key=key)
    return sorted(task.blockers.filter(cleared_at=None).values_list("code", flat=True))


def release(browser, task):
    run = Run.objects.get(key=RUN)
    with TestCase.captureOnCommitCallbacks(execute=True):
        return browser.post(f"/runs/{run.pk}/tasks/{task.pk}/release/")


def test_a_reviewer_releases_the_stop_and_the_task_becomes_ready(desk, alice):
    run = Run.objects.get(key=RUN)
    publish = Task.objects.get(key="publish")
    assert blockers("publish") == [STOP] and not publish.ready
    browser = signed_in(alice)
    page = browser.get(f"/runs/{run.pk}/").content.decode()
    row = page[page.index('id="task-publish"') : page.index('id="task-announce"')]
    assert 'Release<span class="visually-hidden"> the stop of publish</span></button>' in row
    assert (
        "Release<span" not in page[page.index('id="task-build"') : page.index('id="task-publish"')]
    )

    response = release(browser, publish)
    assert response.status_code == 302
    assert response["Location"] == f"/runs/{run.pk}/#task-publish"
    publish.refresh_from_db()
    assert publish.released and publish.ready and blockers("publish") == []
    line = ProgressLine.objects.get(task=publish)
    assert line.text == (
        "publish: alice released its uncertain-dependency stop; its external effect may go ahead"
    )
    assert line.created_at is not None
    ready = Delivery.objects.filter(type="task.ready", payload__data__task="publish")
    assert ready.exists()  # the agent hears of it from the recompute
    page = browser.get(response["Location"]).content.decode()
    row = page[page.index('id="task-publish"') : page.index('id="task-announce"')]
    assert "uncertain-dependency stop released" in row and "Release<span" not in row
    assert "alice released its uncertain-dependency stop" in page  # in the progress lines


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda: Task.objects.filter(key="publish").update(released=True),
         "publish&#x27;s uncertain-dependency stop was released already."),
        (lambda: Task.objects.filter(key="publish").update(dependency_confidence="declared"),
         "publish has no uncertain-dependency stop to release."),
        (lambda: Task.objects.filter(key="publish").update(state="cancelled"),
         "publish is cancelled: only a pending task waits at a stop."),
    ],
)  # fmt: skip
def test_a_release_that_cannot_be_done_says_why(desk, alice, setup, message):
    run = Run.objects.get(key=RUN)
    publish = Task.objects.get(key="publish")
    setup()
    browser = signed_in(alice)
    response = release(browser, publish)
    assert response["Location"] == f"/runs/{run.pk}/#task-publish"
    page = browser.get(response["Location"]).content.decode()
    row = page[page.index('id="task-publish"') : page.index('id="task-announce"')]
    assert f'<p class="error" role="alert">{message}</p>' in row
    assert message not in browser.get(response["Location"]).content.decode()  # shown once
    assert not ProgressLine.objects.exists()


def test_a_failed_runs_stop_is_not_released(desk, alice):
    run = Run.objects.get(key=RUN)
    Run.objects.filter(pk=run.pk).update(state="failed", cause="dropped")
    browser = signed_in(alice)
    assert "the stop of publish" not in browser.get(f"/runs/{run.pk}/").content.decode()
    response = release(browser, Task.objects.get(key="publish"))
    page = browser.get(response["Location"]).content.decode()
    assert "The run has failed (dropped): there is nothing to release." in page
    assert not Task.objects.get(key="publish").released


def test_a_manager_cannot_release_a_stop(desk, fleet):
    run = Run.objects.get(key=RUN)
    browser = signed_in(member("carol", fleet, role="manager"))
    page = browser.get(f"/runs/{run.pk}/").content.decode()
    assert f'<code class="blocker">{STOP}</code>' in page and "the stop of publish" not in page
    response = release(browser, Task.objects.get(key="publish"))
    assert response.status_code == 403
    assert "Only a reviewer of fleet acme can act" in response.content.decode()
    assert not Task.objects.get(key="publish").released


def test_a_task_of_another_run_is_not_found(desk, alice):
    desk.run("other", tasks=[{"key": "x", "agent": "coder"}])
    other = Run.objects.get(key="other")
    publish = Task.objects.get(key="publish")
    response = signed_in(alice).post(f"/runs/{other.pk}/tasks/{publish.pk}/release/")
    assert response.status_code == 404


def test_a_reviewer_releases_the_stop_that_the_fleets_unnamed_roles_put_on_an_effect(
    desk, fleet, alice
):
    from runs.capabilities import unnamed_roles_stop_set

    desk.run(
        "ship",
        tasks=[{"key": "push-tag", "agent": "coder", "effect": "external"}],
    )
    with TestCase.captureOnCommitCallbacks(execute=True):
        unnamed_roles_stop_set(fleet=fleet, on=True)
    push = Task.objects.get(key="push-tag")
    assert blockers("push-tag") == [STOP]
    browser = signed_in(alice)
    run = push.run
    page = browser.get(f"/runs/{run.pk}/").content.decode()
    assert 'Release<span class="visually-hidden"> the stop of push-tag</span></button>' in page

    with TestCase.captureOnCommitCallbacks(execute=True):
        response = browser.post(f"/runs/{run.pk}/tasks/{push.pk}/release/")
    assert response.status_code == 302
    push.refresh_from_db()
    assert push.released and push.ready and blockers("push-tag") == []
    page = browser.get(f"/runs/{run.pk}/").content.decode()
    assert "uncertain-dependency stop released" in page
