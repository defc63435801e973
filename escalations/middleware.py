"""Sends someone signed in with a one-time password to set their own before anything else, and
keeps what a signed-in person saw out of every cache (Back must not show a stale Claim button)."""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.cache import add_never_cache_headers

from fleet.errors import error, errors_body

SET_PASSWORD = "bulkhead.set_password"  # noqa: S105 - a session key, not a password


class OneTimePasswordMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        session = getattr(request, "session", None)
        if session is not None and session.get(SET_PASSWORD):
            target = reverse("set-password")
            if request.path.startswith("/api/") and "HTTP_AUTHORIZATION" not in request.META:
                # The session's own reads wait too; an agent's bearer token is not this session.
                msg = f"set your own password first, at {target}"
                return JsonResponse(errors_body([error("password", msg)]), status=403)
            allowed = (target, reverse("logout"), "/static/", "/api/", "/hooks/", "/healthz")
            if not request.path.startswith(allowed):
                if request.headers.get("HX-Request") == "true":
                    response = HttpResponse(status=204)
                    response["HX-Redirect"] = target
                    return response
                return redirect(target)
        return self.get_response(request)


class NoStoreMiddleware:
    """A page shown to someone signed in is never stored: Back and Forward after an answer fetch
    the escalation as it is now, not the copy with its Claim button (`Cache-Control: no-store`)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated and not request.path.startswith("/static/"):
            add_never_cache_headers(response)
        return response
