"""Reads of the fleet: whose fleets a person sees, and the capabilities board."""

from typing import Any

from django.db.models import Count, Q, QuerySet

from fleet.models import Capability, Fleet, Membership


def fleets_of(user: Any) -> QuerySet[Fleet]:
    return Fleet.objects.filter(memberships__user_id=user.pk or 0).distinct()


def is_manager(user: Any, fleet_id: int) -> bool:
    return Membership.objects.filter(
        user_id=user.pk or 0, fleet_id=fleet_id, role=Membership.Role.MANAGER
    ).exists()


def capability_board(user: Any) -> list[dict[str, Any]]:
    """Each capability of the user's fleets with its state, since when, and what it defers.

    What it defers is read from the stored blockers, which the worker updates after a change:
    a fleet with a recompute still owed is `settling`, and its counts are not yet the truth.
    """
    from runs.models import Blocker, FrontierChange

    capabilities = list(
        Capability.objects.filter(fleet__in=fleets_of(user))
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
    managed = set(
        Membership.objects.filter(user_id=user.pk or 0, role=Membership.Role.MANAGER).values_list(
            "fleet_id", flat=True
        )
    )
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


def deferred_by(capability: Capability) -> QuerySet[Any]:
    from runs.models import Task

    return (
        Task.objects.filter(
            run__fleet_id=capability.fleet_id,
            state="pending",
            blockers__cleared_at__isnull=True,
            blockers__code=f"capability:{capability.name}",
        )
        .select_related("run", "agent")
        .filter(~Q(run__state="failed"))
        .order_by("run__key", "position")
    )


DELIVERIES_PAGE = 50


def delivery_log(
    user: Any, *, fleet: str = "", status: str = "", before: int | None = None
) -> dict[str, Any]:
    """The outbound deliveries of the user's fleets, newest first, a page at a time (by id)."""
    from fleet.models import Delivery

    fleets = list(fleets_of(user).order_by("name"))
    rows = Delivery.objects.filter(fleet__in=fleets).select_related("fleet")
    if fleet:
        rows = rows.filter(fleet__name=fleet)
    if status:
        rows = rows.filter(status=status)
    if before is not None:
        rows = rows.filter(pk__lt=before)
    page = list(rows.order_by("-id").prefetch_related("log")[: DELIVERIES_PAGE + 1])
    return {
        "deliveries": page[:DELIVERIES_PAGE],
        "older": page[DELIVERIES_PAGE - 1].pk if len(page) > DELIVERIES_PAGE else None,
        "fleets": fleets,
    }
