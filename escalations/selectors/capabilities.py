"""The capabilities board: each capability of a person's fleets, and the work it defers."""

from typing import Any

from django.db.models import Count, Exists, OuterRef

from fleet.access import managed_fleet_ids, member_fleets
from fleet.models import Capability, Fleet
from runs.frontier import ROLES
from runs.models import Blocker, FrontierChange
from runs.start_gate import either


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
    fleet_ids = {c.fleet_id for c in capabilities}
    deferring = (
        Blocker.objects.filter(
            cleared_at__isnull=True,
            code__in=codes,
            task__state="pending",
            task__run__fleet_id__in=fleet_ids,
        )
        .values("task__run__fleet_id", "code")
        .annotate(tasks=Count("task", distinct=True), runs=Count("task__run", distinct=True))
    )
    counts: dict[tuple[int, str], dict[str, Any]] = {
        (row["task__run__fleet_id"], row["code"]): dict(row) for row in deferring
    }
    managed = set(managed_fleet_ids(user))
    # Whether each fleet has a change waiting, found by its first one: the worker falling
    # behind leaves thousands, and listing them all to name a fleet or two read every one.
    settling = set(
        Fleet.objects.filter(
            Exists(FrontierChange.objects.filter(run__fleet_id=OuterRef("pk"))),
            pk__in=fleet_ids,
        ).values_list("pk", flat=True)
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


def fleet_roles(user: Any) -> list[dict[str, Any]]:
    """Each of the user's fleets with the capability it names for each role, the roles it
    leaves unnamed, and its setting: whether unnamed roles stop its external effects."""
    fleets = list(member_fleets(user).order_by("name"))
    named = {
        (fleet_id, role): name
        for fleet_id, role, name in Capability.objects.filter(fleet__in=fleets)
        .exclude(role="")
        .values_list("fleet_id", "role", "name")
    }
    stopped = dict(
        Blocker.objects.filter(
            cleared_at__isnull=True,
            code="barrier:uncertain-dependency",
            task__state="pending",
            task__run__fleet__in=fleets,
        )
        .values_list("task__run__fleet_id")
        .annotate(tasks=Count("task", distinct=True))
    )
    managed = set(managed_fleet_ids(user))
    return [
        {
            "fleet": fleet,
            "roles": [(role, named.get((fleet.pk, role))) for role in ROLES],
            "unnamed": either([role for role in ROLES if (fleet.pk, role) not in named]),
            "stopped": stopped.get(fleet.pk, 0),
            "can_change": fleet.pk in managed,
        }
        for fleet in fleets
    ]
