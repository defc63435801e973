"""The delivery log: what was sent to each fleet's callback, and how the receiver answered."""

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from escalations.models import Message
from escalations.selectors.queue import visible_escalations
from escalations.services.messages import shown_target
from escalations.views.pages import row_id
from fleet.models import Delivery
from fleet.selectors import delivery_log


@login_required
@require_GET
def deliveries(request: HttpRequest) -> HttpResponse:
    """The delivery log: what was sent to each fleet's callback, and how the receiver answered."""
    status = request.GET.get("status", "")
    if status not in Delivery.Status.values:
        status = ""
    before = request.GET.get("before", "")
    log = delivery_log(
        request.user,
        fleet=request.GET.get("fleet", ""),
        status=status,
        before=row_id(before),
    )
    query = {k: v for k, v in (("fleet", request.GET.get("fleet", "")), ("status", status)) if v}
    context = {**log, "status": status, "fleet": query.get("fleet", ""), "query": query}
    context["statuses"] = Delivery.Status.values
    context["messages_sent"] = message_log(request.user, fleet=query.get("fleet", ""))
    return render(request, "escalations/deliveries.html", context)


def message_log(user: Any, *, fleet: str) -> list[dict[str, Any]]:
    """The latest emails and chat messages about the person's fleets' escalations."""
    found = Message.objects.filter(escalation__in=visible_escalations(user))
    if fleet:
        found = found.filter(escalation__fleet__name=fleet)
    return [
        {"message": m, "target": shown_target(m.kind, m.target)}
        for m in found.select_related("escalation", "escalation__fleet").order_by(
            "-created_at", "-id"
        )[:50]
    ]
