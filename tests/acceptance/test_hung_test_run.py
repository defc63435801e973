"""Story 3 (seeds/003): resume once, carry on with a progress line, a later failure names the work."""

import pytest

from fleet.models import Delivery
from fleet.stories import hung_test_run, play
from runs.models import Attempt, Run
from tests.acceptance.conftest import api, fleet_for
from tests.conftest import eventually

pytestmark = [pytest.mark.postgres, pytest.mark.worker, pytest.mark.django_db(transaction=True)]
STORY = hung_test_run.STORY
RESUMED = 3  # the step that starts the Resume


def test_the_killed_work_is_resumed_once_then_named_in_the_runs_failure(worker, client, http):
    fleet = fleet_for(STORY, callback_url="http://127.0.0.1:9/unreachable")
    play(fleet, STORY, range(RESUMED), transport=http)
    # The policy decides after commit, in the worker: a Resume, with the same context.
    eventually(lambda: Delivery.objects.filter(type="task.resume").exists())
    play(fleet, STORY, range(RESUMED, RESUMED + 2), transport=http)
    run = Run.objects.get(key=hung_test_run.RUN)
    eventually(lambda: run.progress_lines.filter(text=hung_test_run.PROGRESS).exists())
    attempts = Attempt.objects.filter(task__key="implement").order_by("number")
    assert [a.resumed for a in attempts] == [False, True]
    assert attempts[0].context_hash == attempts[1].context_hash

    play(fleet, STORY, range(RESUMED + 2, len(STORY.steps)), transport=http)
    eventually(lambda: Run.objects.get(pk=run.pk).state == "failed")
    run.refresh_from_db()
    # The seed's words exactly (seeds/003): the killed work ahead of the later step's own cause.
    assert run.cause == (
        "implement session ended with a background task still running (./mvnw test), which was "
        "killed, and a later step failed: no PR found"
    )

    body = api(client, fleet, f"/runs/{hung_test_run.RUN}")
    assert body["state"] == "failed"
    assert body["cause"] == run.cause
    assert [p["text"] for p in body["progress"]] == [hung_test_run.PROGRESS]
    eventually(lambda: Delivery.objects.filter(type="run.failed").exists())
    notice = Delivery.objects.get(type="run.failed")
    assert notice.payload["data"]["cause"] == run.cause
    # Never a second Resume.
    assert Delivery.objects.filter(type="task.resume").count() == 1
