"""The capabilities board: what each capability defers, and a manager taking one down or up."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from escalations.selectors.capabilities import capability_board, fleet_roles
from fleet.access import manages, member_fleets
from fleet.models import Capability
from runs.capabilities import capability_change, unnamed_roles_stop_set


def board(request: HttpRequest, **extra: object) -> dict[str, object]:
    rows = capability_board(request.user)
    # While the worker re-evaluates the work, the board polls itself until the counts are true.
    settling = any(row["settling"] for row in rows)
    return {"rows": rows, "fleets": fleet_roles(request.user), "settling": settling, **extra}


@login_required
@require_GET
def capabilities(request: HttpRequest) -> HttpResponse:
    return render(request, "escalations/capabilities.html", board(request))


@login_required
@require_POST
def unnamed_roles_stop(request: HttpRequest, fleet_id: int) -> HttpResponse:
    """A manager turns the fleet's setting on or off: unnamed roles stop external effects."""
    fleet = get_object_or_404(member_fleets(request.user), pk=fleet_id)
    if not manages(request.user, fleet.pk):
        return HttpResponseForbidden("Only a manager of this fleet can change its settings.")
    on = request.POST.get("on", "")
    if on not in ("1", "0"):
        context = board(request, errors=["Choose on or off."])
        return render(request, "escalations/capabilities.html", context, status=422)
    with transaction.atomic():
        unnamed_roles_stop_set(fleet=fleet, on=on == "1")
    messages.success(
        request,
        f"{fleet.name}: external effects now wait for a reviewer's release while a role is unnamed."
        if on == "1"
        else f"{fleet.name}: unnamed roles no longer stop external effects.",
    )
    return redirect("capabilities")


@login_required
@require_POST
def capability_set(request: HttpRequest, capability_id: int) -> HttpResponse:
    capability = get_object_or_404(
        Capability.objects.select_related("fleet"),
        pk=capability_id,
        fleet__in=member_fleets(request.user),
    )
    if not manages(request.user, capability.fleet_id):
        return HttpResponseForbidden("Only a manager of this fleet can change its capabilities.")
    status = request.POST.get("status", "")
    reason = request.POST.get("reason", "").strip()
    errors = []
    if status not in (Capability.Status.UP, Capability.Status.DOWN):
        errors.append("Choose up or down.")
    if not reason:
        errors.append("Say why: the reason is shown to everyone whose work it defers.")
    if len(reason) > 500:
        errors.append("Keep the reason under 500 characters.")
    if errors:
        context = board(request, errors=errors, failed=capability.pk, reason=reason)
        return render(request, "escalations/capabilities.html", context, status=422)
    with transaction.atomic():
        current = Capability.objects.select_for_update().get(pk=capability.pk)
        if current.status == status:  # another tab, or another manager, set it first
            since = f" since {current.changed_at:%Y-%m-%d %H:%M} UTC" if current.changed_at else ""
            by = f", by {current.changed_by}" if current.changed_by else ""
            already = f"{current.name} is already {status}{since}{by}: nothing was changed."
            context = board(request, errors=[already], failed=capability.pk, reason=reason)
            return render(request, "escalations/capabilities.html", context, status=409)
        capability_change(
            fleet=capability.fleet,
            name=capability.name,
            status=status,
            reason=reason,
            role=None,
            by=f"manager:{request.user.get_username()}",
            at=timezone.now(),
        )
    messages.success(request, f"{capability.name} is now {status}.")
    return redirect("capabilities")
