"""Sends someone signed in with a one-time password to set their own before anything else,
keeps what a signed-in person saw out of every cache (Back must not show a stale Claim button),
and refuses a page's address or form holding a NUL byte, which nothing stored can hold."""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers

from escalations.views.pages import refused_in_place
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


NUL_MESSAGE = (
    "The address or the form holds a NUL byte (\\0), which no field here can hold: remove it "
    "and send it again."
)


class NulByteMiddleware:
    """A NUL byte in a page's query string or form (a careless script's, never a browser's
    typing) is refused before any view reads it: the database holds no NUL, and a filter or an
    answer carrying one would otherwise fail there. The machine-facing paths name the field
    themselves (422)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith(("/api/", "/hooks/")) and holds_nul(request):
            if request.headers.get("HX-Request") == "true":
                return refused_in_place(400, NUL_MESSAGE)
            return render(request, "400.html", {"message": NUL_MESSAGE}, status=400)
        return self.get_response(request)


def holds_nul(request: HttpRequest) -> bool:
    forms = [request.GET] + ([request.POST] if request.method == "POST" else [])
    return any(
        "\x00" in key or any("\x00" in value for value in values)
        for form in forms
        for key, values in form.lists()
    )
