"""A capability goes down or comes back for the whole fleet: the work that needs it is re-evaluated."""

from datetime import datetime

from fleet.errors import Refusal, error
from fleet.models import Capability, Fleet
from runs import scheduler


def capability_change(
    *, fleet: Fleet, name: str, status: str, reason: str, role: str | None, by: str, at: datetime
) -> Capability:
    """Set a capability's state for the whole fleet and re-evaluate the work that needs it."""
    capability, _ = Capability.objects.select_for_update().get_or_create(fleet=fleet, name=name)
    changed = capability.status != status
    if role is not None and capability.role != role:
        holder = Capability.objects.filter(fleet=fleet, role=role).exclude(pk=capability.pk).first()
        if holder is not None:
            raise Refusal(
                [error("data.role", f"the fleet's {role} capability is already {holder.name!r}")]
            )
        capability.role = role
        changed = True
    capability.status = status
    capability.reason = reason
    capability.changed_by = by
    if changed:
        capability.changed_at = at
    capability.save()
    if changed:
        scheduler.capability_changed(fleet=fleet, name=name)
    return capability
