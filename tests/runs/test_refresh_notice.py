"""A capability that went down and came back between two recomputes: the tasks that read its
state never left `ready`, and are still told to refresh it."""

from fleet.models import Delivery, Fleet
from runs.models import Task
from runs.task_state import refresh_needed
from tests.conftest import task


def test_a_ready_reader_is_told_to_refresh_even_if_the_outage_fell_between_recomputes(
    planner, coder, fleet
):
    Fleet.objects.filter(pk=fleet.pk).update(callback_url="http://127.0.0.1:9/hook")
    planner.post("run.started", {"run": "r", "tasks": [task("rd", reads_state_of=["cache"])]})
    assert Task.objects.get(key="rd").ready
    # The capability came back before any recompute saw it down: the frontier never deferred it.
    refresh_needed(fleet_id=fleet.pk, capability="cache")
    told = Delivery.objects.filter(type="task.ready").order_by("-pk").first()
    assert told is not None
    assert told.payload["data"] == {
        "run": "r",
        "task": "rd",
        "agent": "coder",
        "refresh": ["cache"],
    }
    assert Task.objects.get(key="rd").refresh == ["cache"]
