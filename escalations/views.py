"""Pages of the human desk: sign-in, the queue, a packet and its actions, the manager reports."""

from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from django_htmx.middleware import HtmxDetails

from escalations import selectors, services
from escalations.models import Escalation
from escalations.services import AlreadyActed, Refused
from runs.models import Claim


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


LOGIN_FAILURES = 5  # per username, within the window
LOGIN_FAILURES_PER_ADDRESS = 20
LOGIN_WINDOW_SECONDS = 15 * 60


def poll_seconds() -> int:
    return int(getattr(settings, "DESK_POLL_SECONDS", 5))


class SignInView(LoginView):
    """Sign-in with a throttle: repeated failures for a username or an address must wait."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        keys = login_keys(request)
        if any(failures(key) >= limit for key, limit in keys):
            form = self.get_form()
            form.errors.clear()
            context = self.get_context_data(form=form)
            context["throttled"] = LOGIN_WINDOW_SECONDS // 60
            response = self.render_to_response(context, status=429)
            response["Retry-After"] = str(LOGIN_WINDOW_SECONDS)
            return response
        response = super().post(request, *args, **kwargs)
        if response.status_code == 200:  # the form was re-shown: a failed sign-in
            for key, _ in keys:
                cache.add(key, 0, LOGIN_WINDOW_SECONDS)
                try:
                    cache.incr(key)
                except ValueError:  # expired between add and incr
                    cache.set(key, 1, LOGIN_WINDOW_SECONDS)
        else:
            cache.delete(keys[0][0])
        return response


def login_keys(request: HttpRequest) -> list[tuple[str, int]]:
    username = str(request.POST.get("username", "")).strip().lower()[:150]
    address = request.META.get("REMOTE_ADDR", "")
    return [
        (f"login-failures:user:{username}", LOGIN_FAILURES),
        (f"login-failures:address:{address}", LOGIN_FAILURES_PER_ADDRESS),
    ]


def failures(key: str) -> int:
    return int(cache.get(key, 0))


@login_required
def home(request: HtmxHttpRequest) -> HttpResponse:
    return redirect("queue")


def escalation_for(request: HtmxHttpRequest, escalation_id: int) -> Escalation:
    """The escalation if it belongs to one of the person's fleets; 404 otherwise."""
    return get_object_or_404(
        selectors.visible_escalations(request.user).select_related(
            "run", "run__fleet", "task", "task__agent", "packet", "claimed_by", "fleet"
        ),
        pk=escalation_id,
    )


@login_required
@require_GET
def queue(request: HtmxHttpRequest) -> HttpResponse:
    fleet_ids = selectors.member_fleet_ids(request.user)
    query = selectors.QueueQuery.from_params(request.GET)
    now = timezone.now()
    page = selectors.escalation_queue(
        fleet_ids=fleet_ids, query=query, now=now, limit=selectors.PAGE_SIZE
    )
    base = reverse("queue")

    def url(params: str) -> str:
        return f"{base}?{params}" if params else base

    context = {
        "page": page,
        "query": query,
        "statuses": selectors.QUEUE_STATUSES,
        "sorts": selectors.SORTS,
        "sort_label": selectors.SORTS[query.sort],
        "poll_seconds": poll_seconds(),
        "here": url(query.params()),
        "urls": {
            # Polling asks for the same page: the reviewer keeps their place.
            "poll": url(query.params()),
            "first": url(query.params(place=False)) if page.previous else "",
            "previous": url(query.params(before=page.previous, after=None))
            if page.previous
            else "",
            "next": url(query.params(after=page.next, before=None)) if page.next else "",
        },
    }
    if request.htmx:
        return render(request, "escalations/queue.html#queue", context)
    context["choices"] = selectors.queue_choices(fleet_ids)
    return render(request, "escalations/queue.html", context)


def back_to(request: HtmxHttpRequest, default: str) -> str:
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return target
    return default


def claim_response(
    request: HtmxHttpRequest, escalation: Escalation, error: Refused | None
) -> HttpResponseBase:
    if request.POST.get("from") == "packet":
        if request.htmx:
            return packet_status_response(request, escalation_for(request, escalation.pk), error)
        if error is not None:
            return packet_page(
                request, escalation, error=error.message, status=error.status, action="claim"
            )
        return redirect("packet", escalation_id=escalation.pk)
    if request.htmx:
        row = selectors.queue_row(escalation.pk, now=timezone.now())
        context = {
            "row": row,
            "error": error.message if error else "",
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
            {"message": error.message, "escalation": escalation},
            status=error.status,
        )
    return redirect(back_to(request, reverse("queue")))


@login_required
@require_POST
def claim(request: HtmxHttpRequest, escalation_id: int) -> HttpResponseBase:
    escalation = escalation_for(request, escalation_id)
    try:
        services.escalation_claim(escalation=escalation, reviewer=request.user)
    except Refused as refused:
        return claim_response(request, escalation, refused)
    return claim_response(request, escalation, None)


@login_required
@require_POST
def release(request: HtmxHttpRequest, escalation_id: int) -> HttpResponseBase:
    escalation = escalation_for(request, escalation_id)
    try:
        services.escalation_release(escalation=escalation, reviewer=request.user)
    except Refused as refused:
        return claim_response(request, escalation, refused)
    return claim_response(request, escalation, None)


def packet_context(request: HtmxHttpRequest, escalation: Escalation) -> dict[str, Any]:
    now = timezone.now()
    return {
        "escalation": escalation,
        "run": escalation.run,
        "task": escalation.task,
        "view": selectors.packet_view(escalation, now=now),
        "claim_active": services.claim_active(escalation, now),
        "mine": escalation.claimed_by_id == request.user.pk,
        "acted": ""
        if escalation.status in Escalation.OPEN_STATES
        else services.acted_message(escalation),
        "fields": services.PACKET_FIELDS,
        "poll_seconds": poll_seconds(),
    }


def packet_page(
    request: HtmxHttpRequest,
    escalation: Escalation,
    *,
    error: str = "",
    form: dict[str, str] | None = None,
    status: int = 200,
    action: str = "answer",
) -> HttpResponse:
    context = packet_context(request, escalation)
    context.update({"error": error, "form": form or {}, "failed": action if error else ""})
    return render(request, "escalations/packet.html", context, status=status)


@login_required
@require_GET
def packet(request: HtmxHttpRequest, escalation_id: int) -> HttpResponse:
    escalation = escalation_for(request, escalation_id)
    services.escalation_looked_at(escalation=escalation, packet=True)
    return packet_page(request, escalation)


def packet_status_response(
    request: HtmxHttpRequest, escalation: Escalation, error: Refused | None = None
) -> HttpResponse:
    context = packet_context(request, escalation)
    context["error"] = error.message if error else ""
    done = escalation.status not in Escalation.OPEN_STATES
    # 286 stops htmx polling: once someone has acted, nothing more will change here.
    status = 286 if done and request.method == "GET" else (error.status if error else 200)
    return render(request, "escalations/packet.html#status", context, status=status)


@login_required
@require_GET
def packet_status(request: HtmxHttpRequest, escalation_id: int) -> HttpResponse:
    return packet_status_response(request, escalation_for(request, escalation_id))


@login_required
@require_POST
def answer(request: HtmxHttpRequest, escalation_id: int) -> HttpResponse:
    escalation = escalation_for(request, escalation_id)
    text = request.POST.get("text", "")
    option = request.POST.get("option", "")
    form = {"text": text, "option": option}
    try:
        answered = services.escalation_answer(
            escalation=escalation, reviewer=request.user, text=text, option=option
        )
    except Refused as refused:
        escalation = escalation_for(request, escalation_id)
        if request.htmx:
            context = packet_context(request, escalation)
            context.update({"error": refused.message, "form": form, "failed": "answer"})
            lost = isinstance(refused, AlreadyActed)
            context["lost"] = lost
            partial = "outcome" if lost else "answer-form"
            return render(
                request, f"escalations/packet.html#{partial}", context, status=refused.status
            )
        return packet_page(
            request, escalation, error=refused.message, form=form, status=refused.status
        )
    if request.htmx:
        escalation = escalation_for(request, escalation_id)
        context = packet_context(request, escalation)
        context["just_answered"] = answered
        return render(request, "escalations/packet.html#outcome", context)
    return redirect("packet", escalation_id=escalation_id)


def other_action(
    request: HtmxHttpRequest, escalation_id: int, action: str, call: Any
) -> HttpResponse:
    escalation = escalation_for(request, escalation_id)
    form = {k: str(v) for k, v in request.POST.items() if k != "csrfmiddlewaretoken"}
    try:
        call(escalation)
    except Refused as refused:
        return packet_page(
            request,
            escalation_for(request, escalation_id),
            error=refused.message,
            form=form,
            status=refused.status,
            action=action,
        )
    return redirect("packet", escalation_id=escalation_id)


@login_required
@require_POST
def reroute(request: HtmxHttpRequest, escalation_id: int) -> HttpResponse:
    return other_action(
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
@require_POST
def return_packet(request: HtmxHttpRequest, escalation_id: int) -> HttpResponse:
    return other_action(
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
@require_POST
def abort(request: HtmxHttpRequest, escalation_id: int) -> HttpResponse:
    return other_action(
        request,
        escalation_id,
        "abort",
        lambda e: services.escalation_abort(
            escalation=e, reviewer=request.user, reason=request.POST.get("reason", "")
        ),
    )


def claim_of(escalation: Escalation, claim_id: int) -> Claim:
    """A claim shown on this packet: one of its task's run (404 for any other)."""
    return get_object_or_404(Claim.objects.select_related("task"), pk=claim_id, run=escalation.run)


def claim_row_response(
    request: HtmxHttpRequest, escalation: Escalation, claim: Claim, error: Refused | None = None
) -> HttpResponse:
    now = timezone.now()
    radii = selectors.radii_for(escalation.run, now=now)
    row = selectors.claim_view(claim, radii.get(claim.key))
    context = {
        "escalation": escalation,
        "claim": row,
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
        services.claim_recheck(claim=claim, reviewer=request.user)
    except Refused as refused:
        error = refused
    claim.refresh_from_db()
    if request.htmx:
        return claim_row_response(request, escalation, claim, error)
    if error is not None:
        return packet_page(
            request, escalation, error=error.message, status=error.status, action="recheck"
        )
    return redirect("packet", escalation_id=escalation_id)


@login_required
@require_GET
def reports(request: HtmxHttpRequest) -> HttpResponse:
    return HttpResponse("reports")
