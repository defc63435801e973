"""A packet page: its status poll, claiming and releasing it, and its claims' rows and checks."""

from typing import Any

from django.http import HttpResponse, HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from escalations import routing as routing_rules
from escalations import services
from escalations.models import Escalation
from escalations.selectors.packet import claim_view, packet_view
from escalations.selectors.queue import queue_row, visible_escalations
from escalations.selectors.radius import radii_for
from escalations.services import AlreadyActed, routing
from escalations.views.pages import HtmxHttpRequest, login_required, poll_seconds
from fleet.access import reviewed_fleet_ids, reviews
from fleet.errors import Refusal
from fleet.models import Membership
from runs.models import Claim


def escalation_for(request: HtmxHttpRequest, escalation_id: int) -> Escalation:
    """The escalation if it belongs to one of the person's fleets; 404 otherwise."""
    return get_object_or_404(
        visible_escalations(request.user).select_related(
            "run",
            "run__fleet",
            "task",
            "task__agent",
            "packet",
            "claimed_by",
            "fleet",
            "assignee",
            "pool",
        ),
        pk=escalation_id,
    )


def back_to(request: HtmxHttpRequest, default: str) -> str:
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return target
    return default


def refuse_unless_reviewer(request: HtmxHttpRequest, escalation: Escalation) -> None:
    if not reviews(request.user, escalation.fleet_id):
        raise Refusal(
            f"Only a reviewer of fleet {escalation.fleet.name} can act on its escalations: "
            "as its manager you can read the queue and the packets.",
            status=403,
        )


def forbidden(request: HtmxHttpRequest, escalation: Escalation, refused: Refusal) -> HttpResponse:
    """A manager's attempt to act, from a plain form: the reason, and the way back."""
    return render(
        request,
        "403.html",
        {
            "message": refused.message,
            "back": reverse("packet", args=[escalation.pk]),
            "back_label": "Back to the escalation",
        },
        status=403,
    )


def claim_response(
    request: HtmxHttpRequest, escalation: Escalation, error: Refusal | None
) -> HttpResponseBase:
    if error is not None and error.status == 403 and not request.htmx:
        return forbidden(request, escalation, error)
    if request.POST.get("from") == "packet":
        if request.htmx:
            return packet_status_response(request, escalation_for(request, escalation.pk), error)
        return back_to_packet(request, escalation.pk, refused=error, action="claim")
    if request.htmx:
        row = queue_row(escalation.pk, now=timezone.now())
        context = {
            "row": row,
            "error": told(error) if error else "",
            "reviewed": reviewed_fleet_ids(request.user),
            "here": back_to(request, ""),
        }
        return render(
            request,
            "escalations/queue.html#row",
            context,
            status=error.status if error else 200,
        )
    if error is not None:
        return render(
            request,
            "escalations/refused.html",
            {"message": told(error), "escalation": escalation},
            status=error.status,
        )
    return redirect(back_to(request, reverse("queue")))


@login_required
@require_POST
def claim(request: HtmxHttpRequest, escalation_id: int) -> HttpResponseBase:
    escalation = escalation_for(request, escalation_id)
    try:
        refuse_unless_reviewer(request, escalation)
        services.escalation_claim(escalation=escalation, reviewer=request.user)
    except Refusal as refused:
        return claim_response(request, escalation, refused)
    return claim_response(request, escalation, None)


@login_required
@require_POST
def release(request: HtmxHttpRequest, escalation_id: int) -> HttpResponseBase:
    escalation = escalation_for(request, escalation_id)
    try:
        refuse_unless_reviewer(request, escalation)
        services.escalation_release(escalation=escalation, reviewer=request.user)
    except Refusal as refused:
        return claim_response(request, escalation, refused)
    return claim_response(request, escalation, None)


def told(refused: Refusal) -> str:
    """A refusal as the desk says it: someone who acted first is named with how it ended."""
    if isinstance(refused, AlreadyActed):
        return services.outcome_of(refused.escalation)[0]
    return refused.message


def outcome_context(escalation: Escalation) -> dict[str, Any]:
    if escalation.status in Escalation.OPEN_STATES:
        return {"acted": "", "acted_details": []}
    title, details = services.outcome_of(escalation)
    return {"acted": title, "acted_details": details}


def status_seen(escalation: Escalation, now: Any) -> str:
    """What the status bar shows, in short: a poll that finds it unchanged swaps nothing, so
    the reviewer's focus (say on "Claim it") stays where it was."""
    claimed = services.claim_active(escalation, now)
    until = (
        escalation.claim_expires_at.isoformat() if claimed and escalation.claim_expires_at else ""
    )
    return f"{escalation.status}.{escalation.claimed_by_id if claimed else ''}.{until}"


# What each field a packet can be returned for holds, beside its name (the agent's word for it).
FIELD_HELP = {
    "tried": "what the agent tried",
    "ruled_out": "the hypotheses it ruled out, and how",
    "evidence": "what it checked, with the results",
    "smallest_unblocking_question": "the one question",
    "options": "the answers it offers",
}


def packet_context(request: HtmxHttpRequest, escalation: Escalation) -> dict[str, Any]:
    now = timezone.now()
    return {
        "seen": status_seen(escalation, now),
        "can_act": reviews(request.user, escalation.fleet_id),
        "escalation": escalation,
        "run": escalation.run,
        "task": escalation.task,
        "view": packet_view(escalation, now=now),
        "claim_active": services.claim_active(escalation, now),
        "mine": escalation.claimed_by_id == request.user.pk,
        **outcome_context(escalation),
        "fields": [(field, FIELD_HELP.get(field, "")) for field in services.PACKET_FIELDS],
        "note_max": f"{services.NOTE_MAX_CHARS:,}",
        "poll_seconds": poll_seconds(),
        **assignment_context(request, escalation, now),
    }


def assignment_context(
    request: HtmxHttpRequest, escalation: Escalation, now: Any
) -> dict[str, Any]:
    """Who has it, whether it is overdue, and whom the person may hand it to."""
    can = routing.can_hand_off(request.user, escalation.fleet_id)
    return {
        "overdue": routing_rules.overdue(escalation.due_at, now),
        "can_hand_off": can,
        "hand_off_to": list(
            Membership.objects.filter(fleet_id=escalation.fleet_id, role=Membership.Role.REVIEWER)
            .exclude(user_id=escalation.assignee_id or 0)
            .exclude(user_id=request.user.pk or 0)  # to someone else: one's own is a claim
            .order_by("user__username")
            .values_list("user__username", flat=True)
        )
        if can
        else [],
    }


def packet_page(
    request: HtmxHttpRequest,
    escalation: Escalation,
    *,
    error: str = "",
    form: dict[str, str] | None = None,
    status: int = 200,
    action: str = "answer",
    lost: bool = False,
    just_answered: services.Answered | None = None,
) -> HttpResponse:
    """The packet page; to htmx, only its article (the region every action swaps)."""
    context = packet_context(request, escalation)
    if context["can_act"] and escalation.status in Escalation.OPEN_STATES:
        context["abort"] = services.abort_reach(escalation)
    context.update(
        {
            "error": error,
            "form": form or {},
            "failed": action if error else "",
            "lost": lost,
            "just_answered": just_answered,
        }
    )
    template = "escalations/packet.html#packet" if request.htmx else "escalations/packet.html"
    return render(request, template, context, status=status)


# Where a refused action's form is on the page: a redirect back lands on it.
ANCHORS = {"answer": "answer-form", "reroute": "reroute-form", "return": "return-form",
           "abort": "abort-form", "claim": "status", "recheck": "evidence", "split": "waiting"}  # fmt: skip


def flash_key(escalation_id: int) -> str:
    return f"packet-refused-{escalation_id}"


def back_to_packet(
    request: HtmxHttpRequest,
    escalation_id: int,
    *,
    refused: Refusal | None = None,
    form: dict[str, str] | None = None,
    action: str = "answer",
    anchor: str = "",
) -> HttpResponse:
    """Redirect-after-post to the packet page, for a browser without htmx.

    A refusal travels in the session and is shown once, with the draft kept, so that the
    browser never rests on an action's URL (a reload would post again; a visit gets 405).
    """
    url = reverse("packet", args=[escalation_id])
    if refused is None:
        return redirect(url)
    request.session[flash_key(escalation_id)] = {
        "error": told(refused),
        "form": form or {},
        "action": action,
        "lost": isinstance(refused, AlreadyActed),
    }
    return redirect(f"{url}#{anchor or ANCHORS.get(action, 'packet')}")


@login_required
@require_GET
def packet(request: HtmxHttpRequest, escalation_id: int) -> HttpResponse:
    escalation = escalation_for(request, escalation_id)
    if reviews(request.user, escalation.fleet_id):
        # A manager reading along is not a first look: the health report measures reviewers.
        services.escalation_looked_at(escalation=escalation, packet=True)
    refused = request.session.pop(flash_key(escalation_id), None)
    if isinstance(refused, dict):
        return packet_page(
            request,
            escalation,
            error=str(refused.get("error", "")),
            form=refused.get("form") or {},
            action=str(refused.get("action", "answer")),
            lost=bool(refused.get("lost")),
        )
    return packet_page(request, escalation)


def packet_status_response(
    request: HtmxHttpRequest, escalation: Escalation, error: Refusal | None = None
) -> HttpResponse:
    context = packet_context(request, escalation)
    context["error"] = told(error) if error else ""
    done = escalation.status not in Escalation.OPEN_STATES
    if request.method == "GET" and not done and request.GET.get("seen") == context["seen"]:
        return HttpResponse(status=204)  # nothing changed: nothing to swap
    # 286 stops htmx polling: once someone has acted, nothing more will change here.
    status = 286 if done and request.method == "GET" else (error.status if error else 200)
    return render(request, "escalations/packet.html#status", context, status=status)


@login_required
@require_GET
def packet_status(request: HtmxHttpRequest, escalation_id: int) -> HttpResponse:
    return packet_status_response(request, escalation_for(request, escalation_id))


def packet_action(
    request: HtmxHttpRequest,
    escalation_id: int,
    action: str,
    call: Any,
    *,
    anchor: str = "",
    about: dict[str, str] | None = None,
) -> HttpResponse:
    """Answer, reroute, return or abort, then show the new state: the whole packet to htmx (the
    status, what was released, the history and the actions all change), a redirect otherwise."""
    escalation = escalation_for(request, escalation_id)
    form = {k: str(v) for k, v in request.POST.items() if k != "csrfmiddlewaretoken"}
    form.update(about or {})  # which row the form was on, for a refusal to be shown there
    try:
        refuse_unless_reviewer(request, escalation)
        done = call(escalation)
    except Refusal as refused:
        if refused.status == 403 and not request.htmx:
            return forbidden(request, escalation, refused)
        if not request.htmx:
            return back_to_packet(
                request, escalation_id, refused=refused, form=form, action=action, anchor=anchor
            )
        return packet_page(
            request,
            escalation_for(request, escalation_id),
            error=told(refused),
            form=form,
            status=refused.status,
            action=action,
            lost=isinstance(refused, AlreadyActed),
        )
    if not request.htmx:
        return back_to_packet(request, escalation_id)
    return packet_page(
        request,
        escalation_for(request, escalation_id),
        just_answered=done if isinstance(done, services.Answered) else None,
    )


def claim_of(escalation: Escalation, claim_id: int) -> Claim:
    """A claim shown on this packet: one of its task's run (404 for any other)."""
    return get_object_or_404(
        Claim.objects.select_related("task", "run", "run__fleet"), pk=claim_id, run=escalation.run
    )


def claim_row_response(
    request: HtmxHttpRequest, escalation: Escalation, claim: Claim, error: Refusal | None = None
) -> HttpResponse:
    now = timezone.now()
    radii = radii_for(escalation.run, now=now)
    row = claim_view(claim, radii.get(claim.key))
    context = {
        "escalation": escalation,
        "run": escalation.run,
        "claim": row,
        "can_act": reviews(request.user, escalation.fleet_id),
        "claim_error": error.message if error else "",
        "poll_seconds": poll_seconds(),
    }
    status = error.status if error else 200
    if request.method == "GET" and not row["pending"]:
        status = 286  # the verifier has spoken: stop polling
    return render(request, "escalations/packet.html#claim-row", context, status=status)


@login_required
@require_GET
def claim_row(request: HtmxHttpRequest, escalation_id: int, claim_id: int) -> HttpResponse:
    escalation = escalation_for(request, escalation_id)
    return claim_row_response(request, escalation, claim_of(escalation, claim_id))


@login_required
@require_POST
def recheck(request: HtmxHttpRequest, escalation_id: int, claim_id: int) -> HttpResponse:
    escalation = escalation_for(request, escalation_id)
    claim = claim_of(escalation, claim_id)
    error = None
    try:
        refuse_unless_reviewer(request, escalation)
        services.claim_recheck(claim=claim, reviewer=request.user)
    except Refusal as refused:
        error = refused
    claim.refresh_from_db()
    if request.htmx:
        return claim_row_response(request, escalation, claim, error)
    if error is not None and error.status == 403:
        return forbidden(request, escalation, error)
    return back_to_packet(request, escalation_id, refused=error, action="recheck")


@login_required
@require_POST
def check_by_hand(request: HtmxHttpRequest, escalation_id: int, claim_id: int) -> HttpResponse:
    """Verify or refute one of the packet's claims by hand; the whole packet shows the effect."""
    claim = claim_of(escalation_for(request, escalation_id), claim_id)
    return packet_action(
        request,
        escalation_id,
        "check",
        lambda e: services.claim_check_by_hand(
            claim=claim,
            reviewer=request.user,
            verdict=request.POST.get("verdict", ""),
            note=request.POST.get("note", ""),
            seen=request.POST.get("seen", ""),
        ),
        anchor=f"claim-{claim.pk}",
        about={"claim": str(claim.pk)},
    )


@login_required
@require_GET
def packet_evidence(request: HtmxHttpRequest, escalation_id: int) -> HttpResponse:
    """The packet's evidence, polled while its re-check runs; 286 once every entry has a verdict."""
    escalation = escalation_for(request, escalation_id)
    context = packet_context(request, escalation)
    status = 200 if context["view"]["checks_pending"] else 286
    return render(request, "escalations/packet.html#evidence", context, status=status)
