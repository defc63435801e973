"""Who may see or act on a fleet: its members (reviewers and managers)."""

from typing import Any

from fleet.models import Membership


def reviews(user: Any, fleet_id: int) -> bool:
    """A reviewer of the fleet: may act on its escalations, claims and tasks."""
    return Membership.objects.filter(
        user_id=user.pk or 0, fleet_id=fleet_id, role=Membership.Role.REVIEWER
    ).exists()
