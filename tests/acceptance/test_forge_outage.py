"""Story 2 (seeds/001): the forge goes down; the local work completes and the forge work waits."""

import pytest

from fleet.models import Delivery
from fleet.stories import forge_outage, play
from runs.models import Attempt, Blocker, Task
from tests.acceptance.conftest import api, fleet_for
from tests.conftest import eventually

pytestmark = [pytest.mark.postgres, pytest.mark.worker, pytest.mark.django_db(transaction=True)]
STORY = forge_outage.STORY


def open_forge_blockers() -> set[str]:
    rows = Blocker.objects.filter(code="capability:forge", cleared_at=None, task__state="pending")
    return set(rows.values_list("task__key", flat=True))


def test_the_local_work_completes_and_the_forge_work_waits_then_is_released(worker, client, http):
    fleet = fleet_for(STORY, callback_url="http://127.0.0.1:9/unreachable")
    play(fleet, STORY, range(forge_outage.FORGE_BACK), transport=http)

    assert set(Task.objects.filter(state="succeeded").values_list("key", flat=True)) == set(
        forge_outage.LOCAL
    )
    frontier = api(client, fleet, f"/runs/{forge_outage.RUN}/frontier")
    assert frontier["ready"] == []
    deferred = {d["task"]: d["blockers"] for d in frontier["deferred"]}
    assert deferred == {
        "forge-authenticate": ["capability:forge"],
        "push-main": ["capability:forge", "prerequisite:forge-authenticate"],
        "push-work-log": ["capability:forge", "prerequisite:push-main"],
        "bot-commit-status": ["capability:forge", "prerequisite:forge-authenticate"],
    }
    # Nothing was attempted against the forge: the one try was refused at the gate.
    assert not Attempt.objects.filter(task__key__in=forge_outage.FORGE).exists()
    eventually(lambda: open_forge_blockers() == set(forge_outage.FORGE))

    play(fleet, STORY, [forge_outage.FORGE_BACK], transport=http)
    eventually(lambda: not open_forge_blockers())
    eventually(lambda: Task.objects.get(key="forge-authenticate").ready)
    cleared = Blocker.objects.filter(code="capability:forge")
    assert cleared.count() == 4 and all(b.cleared_at >= b.set_at for b in cleared)
    released = api(client, fleet, f"/runs/{forge_outage.RUN}/frontier")
    assert released["ready"] == ["forge-authenticate"]
    assert Delivery.objects.filter(
        type="task.ready", payload__data__task="forge-authenticate"
    ).exists()
    # Released without rebuilding state: the local work stands as it was, one attempt each.
    for key in forge_outage.LOCAL:
        assert Task.objects.get(key=key).state == "succeeded"
        assert Attempt.objects.filter(task__key=key).count() == 1
    assert not Attempt.objects.filter(task__key__in=forge_outage.FORGE).exists()
