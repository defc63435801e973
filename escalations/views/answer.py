"""What a reviewer does with a packet: answer it, reroute it, return it, abort the run, or split
off a task that joined it on a question that only looks alike."""

from functools import wraps
from typing import Any

from django.http import HttpResponse, HttpResponseBase
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from escalations import services
from escalations.views.packet import packet_action
from escalations.views.pages import HtmxHttpRequest, login_required, row_id


def acts_on_packet(view: Any) -> Any:
    """POST only; a visit (a bookmark, the history) goes to the packet page rather than a 405."""
    posted = require_POST(view)

    @wraps(view)
    def wrapper(request: HtmxHttpRequest, escalation_id: int) -> HttpResponseBase:
        if request.method in ("GET", "HEAD"):
            return redirect("packet", escalation_id=escalation_id)
        return posted(request, escalation_id)

    return wrapper


@login_required
@acts_on_packet
def answer(request: HtmxHttpRequest, escalation_id: int) -> HttpResponse:
    return packet_action(
        request,
        escalation_id,
        "answer",
        lambda e: services.escalation_answer(
            escalation=e,
            reviewer=request.user,
            text=request.POST.get("text", ""),
            option=request.POST.get("option", ""),
            packet=shown_packet(request.POST.get("packet")),
        ),
    )


def shown_packet(value: str | None) -> int | None:
    """The packet the answer form was shown with (its page carries it); None when the post does
    not say (a script's), and 0, which names no packet, for anything that is not an id."""
    if value is None:
        return None
    return row_id(value) or 0


@login_required
@acts_on_packet
def reroute(request: HtmxHttpRequest, escalation_id: int) -> HttpResponse:
    return packet_action(
        request,
        escalation_id,
        "reroute",
        lambda e: services.escalation_reroute(
            escalation=e,
            reviewer=request.user,
            agent=request.POST.get("agent", ""),
            note=request.POST.get("note", ""),
        ),
    )


@login_required
@acts_on_packet
def return_packet(request: HtmxHttpRequest, escalation_id: int) -> HttpResponse:
    return packet_action(
        request,
        escalation_id,
        "return",
        lambda e: services.escalation_return(
            escalation=e,
            reviewer=request.user,
            field=request.POST.get("field", ""),
            note=request.POST.get("note", ""),
        ),
    )


@login_required
@acts_on_packet
def abort(request: HtmxHttpRequest, escalation_id: int) -> HttpResponse:
    return packet_action(
        request,
        escalation_id,
        "abort",
        lambda e: services.escalation_abort(
            escalation=e, reviewer=request.user, reason=request.POST.get("reason", "")
        ),
    )


@login_required
@acts_on_packet
def split(request: HtmxHttpRequest, escalation_id: int) -> HttpResponse:
    """A task that joined on a question that only looks alike gets an escalation of its own."""
    task = request.POST.get("task", "")
    return packet_action(
        request,
        escalation_id,
        "split",
        lambda e: services.escalation_split(
            escalation=e, reviewer=request.user, task_id=row_id(task) or 0
        ),
        anchor="waiting",
    )
