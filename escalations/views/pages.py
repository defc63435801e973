"""Plumbing every page of the desk shares: sign-in for htmx, the poll, a refusal in place."""

import json
from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required as django_login_required
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


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


def row_id(value: str) -> int | None:
    """A form's or an address's id, if it is one a table can hold: ASCII digits below 2**63
    (`"²".isdigit()` is true, and `int("²")` fails; a longer number overflows the column)."""
    if not (value.isascii() and value.isdecimal()) or len(value) > 19:
        return None
    number = int(value)
    return number if number < 2**63 else None


def poll_seconds() -> int:
    return int(getattr(settings, "DESK_POLL_SECONDS", 5))


def refused_in_place(status: int, message: str) -> HttpResponse:
    """An htmx request refused outside its view: say why and swap nothing, so nothing the
    reviewer typed is lost and no whole page lands inside a row (desk.js shows the message)."""
    response = HttpResponse(status=status)
    response["HX-Reswap"] = "none"
    response["HX-Trigger"] = json.dumps({"bulkhead:refused": {"message": message}})
    return response
