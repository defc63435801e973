"""Reads of the fleet: the log of what was delivered to each fleet's callback."""

from typing import Any

from django.db.models import Q

from fleet.access import member_fleets
from fleet.models import Delivery

DELIVERIES_PAGE = 50


def delivery_log(
    user: Any, *, fleet: str = "", status: str = "", before: int | None = None
) -> dict[str, Any]:
    """The outbound deliveries of the user's fleets, newest first (by when each was recorded),
    a page at a time (after the delivery `before`)."""
    fleets = list(member_fleets(user).order_by("name"))
    rows = Delivery.objects.filter(fleet__in=fleets).select_related("fleet")
    if fleet:
        rows = rows.filter(fleet__name=fleet)
    if status:
        rows = rows.filter(status=status)
    if before is not None:
        # Newest first by when each was recorded (a story's notifications carry its times).
        at = Delivery.objects.filter(pk=before).values_list("created_at", flat=True).first()
        rows = (
            rows.filter(Q(created_at__lt=at) | Q(created_at=at, pk__lt=before))
            if at is not None
            else rows.none()
        )
    page = list(rows.order_by("-created_at", "-id").prefetch_related("log")[: DELIVERIES_PAGE + 1])
    return {
        "deliveries": page[:DELIVERIES_PAGE],
        "older": page[DELIVERIES_PAGE - 1].pk if len(page) > DELIVERIES_PAGE else None,
        "fleets": fleets,
    }
