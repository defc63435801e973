"""A capability goes down or comes back for the whole fleet: the work that needs it is re-evaluated."""

from datetime import datetime

from fleet.errors import Refusal, error
from fleet.models import Capability, Fleet
from runs import scheduler, task_state
from runs.models import Run


def capability_change(
    *, fleet: Fleet, name: str, status: str, reason: str, role: str | None, by: str, at: datetime
) -> Capability:
    """Set a capability's state for the whole fleet and re-evaluate the work that needs it.

    A capability that comes back (down, now up) leaves the work that reads its state holding
    state from before the outage: each such task must re-read it before it starts (`refresh`).
    """
    capability, _ = Capability.objects.select_for_update().get_or_create(fleet=fleet, name=name)
    came_back = capability.status == Capability.Status.DOWN and status == Capability.Status.UP
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
    if came_back:
        task_state.refresh_needed(fleet_id=fleet.pk, capability=name)
    if changed:
        scheduler.capability_changed(fleet=fleet, name=name)
    return capability


def unnamed_roles_stop_set(*, fleet: Fleet, on: bool) -> Fleet:
    """The fleet's setting: while it names no authority, observability or rollback capability,
    each external effect waits for a reviewer's release. Its running runs are re-evaluated."""
    fleet = Fleet.objects.select_for_update().get(pk=fleet.pk)
    if fleet.unnamed_roles_stop == on:
        return fleet
    fleet.unnamed_roles_stop = on
    fleet.save(update_fields=["unnamed_roles_stop"])
    for run in Run.objects.filter(fleet=fleet, state=Run.State.RUNNING):
        run.fleet = fleet
        scheduler.mark_changed(run, None)
    return fleet
