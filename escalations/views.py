"""Pages of the human desk: sign-in, the queue, a packet and its actions, the manager reports."""

import csv
from datetime import timedelta
from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required as django_login_required
from django.contrib.auth.views import LoginView, PasswordChangeView
from django.core.cache import cache
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from django_htmx.middleware import HtmxDetails

from escalations import selectors, services
from escalations.middleware import SET_PASSWORD
from escalations.models import Escalation
from escalations.services import AlreadyActed
from fleet.errors import Refusal
from fleet.models import Fleet, OneTimePassword
from runs.models import Claim


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


LOGIN_FAILURES = 5  # per username, within the window
LOGIN_FAILURES_PER_ADDRESS = 20
LOGIN_WINDOW_SECONDS = 15 * 60


def login_required(view: Any) -> Any:
    """Django's login_required, but an htmx request (a poll) is sent to sign in as a whole page,
    not handed the sign-in form to swap into the queue."""
    guarded = django_login_required(view)

    @wraps(view)
    def wrapper(request: HtmxHttpRequest, *args: Any, **kwargs: Any) -> Any:
        if request.htmx and not request.user.is_authenticated:
            response = HttpResponse(status=204)
            page = request.htmx.current_url_abs_path or request.get_full_path()
            response["HX-Redirect"] = f"{reverse('login')}?{urlencode({'next': page})}"
            return response
        return guarded(request, *args, **kwargs)

    return wrapper


def poll_seconds() -> int:
    return int(getattr(settings, "DESK_POLL_SECONDS", 5))


class SignInView(LoginView):
    """Sign-in with a throttle: repeated failures for a username or an address must wait."""

    def form_valid(self, form: Any) -> HttpResponse:
        user = form.get_user()
        one_time = OneTimePassword.objects.filter(user_id=user.pk).first()
        if one_time is not None and one_time.used_at is not None:
            # It signed in once already; only that session may replace it.
            form.add_error(
                None,
                "This one-time password has been used. Ask for a new one "
                "(member_add USERNAME --fleet FLEET --role ROLE --new-password).",
            )
            return self.form_invalid(form)
        response = super().form_valid(form)
        if one_time is not None:
            OneTimePassword.objects.filter(pk=one_time.pk).update(used_at=timezone.now())
            self.request.session[SET_PASSWORD] = True  # the middleware holds them there
        return response

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        # Someone already signed in has nothing to do here: on to where they were going.
        if request.user.is_authenticated:
            return redirect(self.get_redirect_url() or reverse("queue"))
        return super().get(request, *args, **kwargs)

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


class SetPasswordView(PasswordChangeView):
    """A one-time password's session sets the user's own password (anyone may change theirs)."""

    template_name = "registration/set_password.html"

    def get_success_url(self) -> str:
        return reverse("home")

    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        OneTimePassword.objects.filter(user_id=self.request.user.pk or 0).delete()
        self.request.session.pop(SET_PASSWORD, None)
        messages.success(self.request, "Your password is set: sign in with it from now on.")
        return response

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["one_time"] = bool(self.request.session.get(SET_PASSWORD))
        return context


def login_keys(request: HttpRequest) -> list[tuple[str, int]]:
    username = str(request.POST.get("username", "")).strip().lower()[:150]
    return [
        (f"login-failures:user:{username}", LOGIN_FAILURES),
        (f"login-failures:address:{client_address(request)}", LOGIN_FAILURES_PER_ADDRESS),
    ]


def client_address(request: HttpRequest) -> str:
    """Who is signing in. Behind the proxy every request comes from it: the client is the last
    address it appended to X-Forwarded-For (earlier entries are the client's own say-so)."""
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if settings.BEHIND_PROXY and forwarded.strip():
        return forwarded.split(",")[-1].strip()
    return str(request.META.get("REMOTE_ADDR", ""))


def failures(key: str) -> int:
    return int(cache.get(key, 0))


@login_required
@require_GET
def home(request: HtmxHttpRequest) -> HttpResponse:
    summary = selectors.waiting_summary(request.user, now=timezone.now())
    return render(request, "escalations/home.html", summary)


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
        "reviewed": selectors.reviewed_fleet_ids(request.user),
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


def refuse_unless_reviewer(request: HtmxHttpRequest, escalation: Escalation) -> None:
    if not selectors.reviews(request.user, escalation.fleet_id):
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
        row = selectors.queue_row(escalation.pk, now=timezone.now())
        context = {
            "row": row,
            "error": told(error) if error else "",
            "reviewed": selectors.reviewed_fleet_ids(request.user),
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


def packet_context(request: HtmxHttpRequest, escalation: Escalation) -> dict[str, Any]:
    now = timezone.now()
    return {
        "seen": status_seen(escalation, now),
        "can_act": selectors.reviews(request.user, escalation.fleet_id),
        "escalation": escalation,
        "run": escalation.run,
        "task": escalation.task,
        "view": selectors.packet_view(escalation, now=now),
        "claim_active": services.claim_active(escalation, now),
        "mine": escalation.claimed_by_id == request.user.pk,
        **outcome_context(escalation),
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
           "abort": "abort-form", "claim": "status", "recheck": "evidence"}  # fmt: skip


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
    if selectors.reviews(request.user, escalation.fleet_id):
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
        ),
    )


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


def claim_of(escalation: Escalation, claim_id: int) -> Claim:
    """A claim shown on this packet: one of its task's run (404 for any other)."""
    return get_object_or_404(
        Claim.objects.select_related("task", "run", "run__fleet"), pk=claim_id, run=escalation.run
    )


def claim_row_response(
    request: HtmxHttpRequest, escalation: Escalation, claim: Claim, error: Refusal | None = None
) -> HttpResponse:
    now = timezone.now()
    radii = selectors.radii_for(escalation.run, now=now)
    row = selectors.claim_view(claim, radii.get(claim.key))
    context = {
        "escalation": escalation,
        "run": escalation.run,
        "claim": row,
        "can_act": selectors.reviews(request.user, escalation.fleet_id),
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
        ),
        anchor=f"claim-{claim.pk}",
        about={"claim": str(claim.pk)},
    )


WINDOWS = {"7": 7, "30": 30, "90": 90, "all": None}


def report_scope(request: HtmxHttpRequest) -> tuple[list[int], dict[str, Any]]:
    """The fleets the person manages (narrowed by ?fleet=) and the window (?days=)."""
    managed = selectors.managed_fleet_ids(request.user)
    fleets = dict(Fleet.objects.filter(pk__in=managed).order_by("name").values_list("name", "pk"))
    chosen = request.GET.get("fleet", "")
    ids = [fleets[chosen]] if chosen in fleets else list(fleets.values())
    # All of it unless narrowed: a first look should include the past runs a fleet imported.
    days = request.GET.get("days", "all")
    if days not in WINDOWS:
        days = "all"
    window = WINDOWS[days]
    since = timezone.now() - timedelta(days=window) if window is not None else None
    return ids, {
        "fleets": list(fleets),
        "fleet": chosen if chosen in fleets else "",
        "days": days,
        "since": since,
        "managed": bool(managed),
        "windows": [
            ("7", "Last 7 days"),
            ("30", "Last 30 days"),
            ("90", "Last 90 days"),
            ("all", "All time"),
        ],
        "query": urlencode({k: v for k, v in (("fleet", chosen), ("days", days)) if v}),
    }


def report_data(request: HtmxHttpRequest) -> dict[str, Any]:
    ids, scope = report_scope(request)
    now = timezone.now()
    runs = selectors.report_runs(ids, since=scope["since"], now=now)
    return {
        **scope,
        "runs": runs,
        "handoffs": selectors.handoffs_for_fleet(ids, since=scope["since"], now=now) if ids else [],
        "health": selectors.escalation_health(ids, since=scope["since"], runs=runs),
        "retries": selectors.retry_rows(ids, since=scope["since"]),
        "chart": {
            "labels": [f"{r['run'].key} ({r['run'].started_at:%Y-%m-%d})" for r in runs],
            "minutes": [r["minutes"] for r in runs],
            "agents": [r["agents"] for r in runs],
            "artifacts": [r["artifacts"] for r in runs],
        },
    }


def managers_only(request: HtmxHttpRequest) -> HttpResponse | None:
    if selectors.managed_fleet_ids(request.user):
        return None
    return render(request, "escalations/reports_forbidden.html", status=403)


@login_required
@require_GET
def reports_page(request: HtmxHttpRequest) -> HttpResponse:
    refused = managers_only(request)
    if refused is not None:
        return refused
    return render(request, "escalations/reports.html", report_data(request))


CSV_TABLES = ("runs", "handoffs", "escalations", "retries")


class CsvWriter:
    """csv.writer, with minutes to one decimal and yes/no for flags, as the page shows them."""

    def __init__(self, response: HttpResponse) -> None:
        self.out = csv.writer(response)

    @staticmethod
    def cell(value: Any) -> Any:
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, float):
            return f"{value:.1f}"
        return "" if value is None else value

    def writerow(self, row: list[Any]) -> None:
        self.out.writerow([self.cell(value) for value in row])


@login_required
@require_GET
def reports_csv(request: HtmxHttpRequest, table: str) -> HttpResponse:
    refused = managers_only(request)
    if refused is not None:
        return refused
    if table not in CSV_TABLES:
        raise Http404(f"no report table {table!r}")
    data = report_data(request)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="bulkhead-{table}.csv"'
    out = CsvWriter(response)
    if table == "runs":
        out.writerow(["fleet", "run", "started_at", "state", "claims", "unverified", "refuted",
                      "widest_claim", "agents", "artifacts", "minutes", "tasks",
                      "late_disasters"])  # fmt: skip
        for r in data["runs"]:
            out.writerow([r["fleet"], r["run"].key, r["run"].started_at.isoformat(), r["run"].state,
                          r["claims"], r["unverified"], r["refuted"], r["claim"], r["agents"],
                          r["artifacts"], r["minutes"], r["tasks"],
                          " ".join(r["late_disasters"])])  # fmt: skip
    elif table == "handoffs":
        out.writerow(["fleet", "producer", "consumer", "claims", "checkable", "refuted",
                      "median_unchecked_minutes"])  # fmt: skip
        for h in data["handoffs"]:
            out.writerow([h["fleet"], h["producer"], h["consumer"], h["claims"], h["checkable"],
                          h["refuted"], h["median_unchecked_minutes"]])  # fmt: skip
    elif table == "escalations":
        out.writerow(["id", "fleet", "run", "task", "status", "attempt", "early", "opened_at",
                      "first_look_minutes", "answer_minutes", "packet_to_action_minutes"])  # fmt: skip
        for e in data["health"]["rows"]:
            out.writerow([e["id"], e["fleet"], e["run"], e["task"], e["status"], e["attempt"],
                          e["early"], e["opened_at"].isoformat(), e["first_look_minutes"],
                          e["answer_minutes"], e["packet_to_action_minutes"]])  # fmt: skip
    else:
        out.writerow(["task", "failed_attempt", "failure", "repeat", "prompt_hash", "context_hash"])
        for row in data["retries"]:
            out.writerow([row["task"], row["failed_attempt"], row["failure"], row["repeat"],
                          row["prompt_hash"], row["context_hash"]])  # fmt: skip
    return response
