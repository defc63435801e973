"""The first page after signing in: what waits for a person, and why."""

from datetime import datetime
from typing import Any

from escalations.models import Escalation, JoinedTask
from escalations.selectors import queue
from escalations.selectors.capabilities import capability_board
from fleet.access import member_fleet_ids
from runs.models import Run, Task


def waiting_summary(user: Any, *, now: datetime) -> dict[str, Any]:
    """The first page after signing in: what waits for a person in the user's fleets, and why."""
    fleet_ids = member_fleet_ids(user)
    waiting = Escalation.objects.filter(
        fleet_id__in=fleet_ids, status__in=Escalation.OPEN_STATES
    ).select_related("run", "task", "task__agent", "packet", "claimed_by")
    oldest = list(waiting.order_by("opened_at", "id")[:3])
    # Counted up to the queue's cap, as the queue counts: past it, "1,000+" (counting 100,000
    # waiting escalations read them all on every visit to this page).
    count = waiting.values("id")[: queue.COUNT_CAP + 1].count()
    joined = (
        JoinedTask.objects.filter(left_at__isnull=True, escalation__in=waiting)
        .values("id")[: queue.COUNT_CAP + 1]
        .count()
    )
    return {
        "waiting": count,
        "waiting_label": queue.capped(count),
        "tasks": queue.capped(count + joined),
        "joined": joined,
        "joined_label": queue.capped(joined),
        "oldest": [
            {
                "escalation": e,
                "question": e.packet.smallest_unblocking_question if e.packet else None,
                "age": now - e.opened_at,
            }
            for e in oldest
        ],
        "down": [row for row in capability_board(user) if row["capability"].status == "down"],
        "stops": Task.objects.filter(
            run__fleet_id__in=fleet_ids,
            run__state=Run.State.RUNNING,
            state=Task.State.PENDING,
            blockers__cleared_at__isnull=True,
            blockers__code="barrier:uncertain-dependency",
        )
        .select_related("run")
        .order_by("run_id", "position")[:10],
        "failed": Run.objects.filter(fleet_id__in=fleet_ids, state=Run.State.FAILED).order_by(
            "-finished_at", "-id"
        )[:5],
    }
