"""Reaching reviewers: a signed link from a message, handing an escalation off, and the page
where a reviewer marks themself away and says where they are reached (and a manager where
the fleet's escalations are announced)."""

from typing import Any

from django.http import HttpResponse, HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from escalations import links
from escalations.models import Channel, DueRule, Pool, RoutingRule
from escalations.services import messages, routing
from escalations.views.answer import acts_on_packet
from escalations.views.packet import back_to_packet, escalation_for
from escalations.views.pages import HtmxHttpRequest, login_required
from fleet.access import managed_fleet_ids
from fleet.errors import Refusal
from fleet.models import Fleet


@login_required
@require_GET
def escalation_link(request: HtmxHttpRequest, token: str) -> HttpResponse:
    """A link from an email or chat message: signed and expiring, opened only once signed in
    (the packet page then checks the person is a member of the escalation's fleet)."""
    try:
        escalation_id = links.escalation_of(token)
    except links.LinkRefused as refused:
        return render(
            request,
            "escalations/link_refused.html",
            {"expired": refused.expired, "lifetime": links.lifetime()},
            status=410 if refused.expired else 400,
        )
    return redirect("packet", escalation_id=escalation_id)


@login_required
@acts_on_packet
def hand_off(request: HtmxHttpRequest, escalation_id: int) -> HttpResponseBase:
    escalation = escalation_for(request, escalation_id)
    form = {"to": request.POST.get("to", ""), "note": request.POST.get("note", "")}
    try:
        routing.escalation_hand_off(
            escalation=escalation, by=request.user, to=form["to"], note=form["note"]
        )
    except Refusal as refused:
        return back_to_packet(
            request, escalation_id, refused=refused, form=form, action="hand-off", anchor="hand-off"
        )
    return redirect(reverse("packet", args=[escalation_id]) + "#assignment")


def notifications_context(request: HtmxHttpRequest, error: str = "") -> dict[str, Any]:
    user: Any = request.user
    managed = list(Fleet.objects.filter(pk__in=managed_fleet_ids(request.user)).order_by("name"))
    fleets = []
    for fleet in managed:
        fleets.append(
            {
                "fleet": fleet,
                "channels": [
                    {"id": c.pk, "kind": c.kind, "target": messages.shown_target(c.kind, c.target)}
                    for c in Channel.objects.filter(fleet=fleet).order_by("id")
                ],
                "pools": [
                    {
                        "name": p.name,
                        "members": [
                            m.user.get_username()
                            for m in p.members.select_related("user").order_by("user__username")
                        ],
                    }
                    for p in Pool.objects.filter(fleet=fleet).order_by("name")
                ],
                "rules": list(
                    RoutingRule.objects.filter(fleet=fleet).select_related("pool", "next_pool")
                ),
                "due": list(DueRule.objects.filter(fleet=fleet).order_by("minutes")),
            }
        )
    return {
        "away": routing.is_away(user),
        "channels": [
            {"id": c.pk, "kind": c.kind, "target": messages.shown_target(c.kind, c.target)}
            for c in Channel.objects.filter(user=user).order_by("id")
        ],
        "fallback_email": user.email,
        "fleets": fleets,
        "error": error,
    }


@login_required
@require_http_methods(["GET", "POST"])
def notifications(request: HtmxHttpRequest) -> HttpResponseBase:
    """Away or not, the person's channels, and (for a manager) the fleet's."""
    if request.method == "GET":
        return render(request, "escalations/notifications.html", notifications_context(request))
    action = request.POST.get("action", "")
    try:
        if action == "away":
            routing.reviewer_set_away(user=request.user, away=request.POST.get("away") == "1")
        elif action == "add":
            fleet = managed_fleet(request)
            messages.channel_add(
                kind=request.POST.get("kind", ""),
                target=request.POST.get("target", ""),
                fleet=fleet,
                user=None if fleet else request.user,
            )
        elif action == "remove":
            channel = get_object_or_404(Channel, pk=int(request.POST.get("channel") or 0))
            if channel.user_id != request.user.pk and channel.fleet_id not in managed_fleet_ids(
                request.user
            ):
                raise Refusal("That channel is neither yours nor of a fleet you manage.", 403)
            messages.channel_remove(channel=channel)
        else:
            raise Refusal(f"{action[:50]!r} is not something this page does.", 400)
    except (Refusal, ValueError) as refused:
        message = refused.message if isinstance(refused, Refusal) else "That is not a channel."
        status = refused.status if isinstance(refused, Refusal) else 400
        context = notifications_context(request, error=message)
        context["form"] = {k: request.POST.get(k, "") for k in ("kind", "target", "fleet")}
        return render(request, "escalations/notifications.html", context, status=status)
    return redirect("notifications")


def managed_fleet(request: HtmxHttpRequest) -> Fleet | None:
    """The fleet a channel is added to (a manager's form), or None: the person's own."""
    name = request.POST.get("fleet", "")
    if not name:
        return None
    fleet = Fleet.objects.filter(name=name, pk__in=managed_fleet_ids(request.user)).first()
    if fleet is None:
        raise Refusal(f"You do not manage a fleet named {name[:100]!r}.", 403)
    return fleet
