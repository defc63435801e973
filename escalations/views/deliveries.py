"""The delivery log: what was sent to each fleet's callback, and how the receiver answered."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

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
        before=int(before) if before.isdigit() else None,
    )
    query = {k: v for k, v in (("fleet", request.GET.get("fleet", "")), ("status", status)) if v}
    context = {**log, "status": status, "fleet": query.get("fleet", ""), "query": query}
    context["statuses"] = Delivery.Status.values
    return render(request, "escalations/deliveries.html", context)
