"""The capabilities board: each capability of a person's fleets, and the work it defers."""

from typing import Any

from django.db.models import Count

from fleet.access import managed_fleet_ids, member_fleets
from fleet.models import Capability
from runs.models import Blocker, FrontierChange


def capability_board(user: Any) -> list[dict[str, Any]]:
    """Each capability of the user's fleets with its state, since when, and what it defers.

    What it defers is read from the stored blockers, which the worker updates after a change:
    a fleet with a recompute still owed is `settling`, and its counts are not yet the truth.
    """
    capabilities = list(
        Capability.objects.filter(fleet__in=member_fleets(user))
        .select_related("fleet")
        .order_by("fleet__name", "name")
    )
    codes = [f"capability:{c.name}" for c in capabilities]
    deferring = (
        Blocker.objects.filter(cleared_at__isnull=True, code__in=codes, task__state="pending")
        .values("task__run__fleet_id", "code")
        .annotate(tasks=Count("task", distinct=True), runs=Count("task__run", distinct=True))
    )
    counts: dict[tuple[int, str], dict[str, Any]] = {
        (row["task__run__fleet_id"], row["code"]): dict(row) for row in deferring
    }
    managed = set(managed_fleet_ids(user))
    settling = set(
        FrontierChange.objects.filter(
            run__fleet_id__in={c.fleet_id for c in capabilities}
        ).values_list("run__fleet_id", flat=True)
    )
    rows = []
    for capability in capabilities:
        row: dict[str, Any] = counts.get((capability.fleet_id, f"capability:{capability.name}"), {})
        rows.append(
            {
                "capability": capability,
                "tasks": row.get("tasks", 0),
                "runs": row.get("runs", 0),
                "can_change": capability.fleet_id in managed,
                "settling": capability.fleet_id in settling,
            }
        )
    return rows
