"""The first page after signing in, and the escalation queue with its filters and pages."""

from django.http import HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from escalations.selectors import queue as queue_selectors
from escalations.selectors.home import waiting_summary
from escalations.views.pages import HtmxHttpRequest, login_required, poll_seconds
from fleet.access import member_fleet_ids, reviewed_fleet_ids


@login_required
@require_GET
def home(request: HtmxHttpRequest) -> HttpResponse:
    summary = waiting_summary(request.user, now=timezone.now())
    return render(request, "escalations/home.html", summary)


@login_required
@require_GET
def queue(request: HtmxHttpRequest) -> HttpResponse:
    fleet_ids = member_fleet_ids(request.user)
    query = queue_selectors.QueueQuery.from_params(request.GET)
    now = timezone.now()
    page = queue_selectors.escalation_queue(
        fleet_ids=fleet_ids,
        query=query,
        now=now,
        limit=queue_selectors.PAGE_SIZE,
        user_id=request.user.pk or 0,
    )
    base = reverse("queue")

    def url(params: str) -> str:
        return f"{base}?{params}" if params else base

    context = {
        "page": page,
        "query": query,
        "statuses": queue_selectors.QUEUE_STATUSES,
        "sorts": queue_selectors.SORTS,
        "assigned": queue_selectors.ASSIGNED,
        "sort_label": queue_selectors.SORTS[query.sort],
        "poll_seconds": poll_seconds(),
        "reviewed": reviewed_fleet_ids(request.user),
        "here": url(query.params()),
        "error": "",  # a row's refusal, when a claim answers with its row alone
        # The token as text, not the context processor's lazy object: every row's form has it.
        "csrf_token": get_token(request),
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
    context["choices"] = queue_selectors.queue_choices(fleet_ids)
    return render(request, "escalations/queue.html", context)
