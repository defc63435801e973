"""Signing in, with a throttle on failures, and setting a one-time password's own password."""

import logging
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import LoginView, PasswordChangeView
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone

from escalations.middleware import SET_PASSWORD
from fleet.models import OneTimePassword

log = logging.getLogger(__name__)

LOGIN_FAILURES = 5  # per username, within the window
LOGIN_FAILURES_PER_ADDRESS = 20
LOGIN_WINDOW_SECONDS = 15 * 60


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
        # Counted before the password is checked, atomically: concurrent tries cannot all slip
        # under the limit by reading the count before any of them adds to it.
        keys = login_keys(request)
        if any(bump(key) > limit for key, limit in keys):
            form = self.get_form()
            form.errors.clear()
            context = self.get_context_data(form=form)
            context["throttled"] = LOGIN_WINDOW_SECONDS // 60
            response = self.render_to_response(context, status=429)
            response["Retry-After"] = str(LOGIN_WINDOW_SECONDS)
            return response
        response = super().post(request, *args, **kwargs)
        if response.status_code != 200:  # signed in: only failures count
            forget(keys)
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

    def get_form(self, form_class: Any = None) -> Any:
        form = super().get_form(form_class)
        # The page asks for the one-time password (or the current one), not an "old" one.
        form.error_messages = {
            **form.error_messages,
            "password_incorrect": (
                "That is not the one-time password you were given: type it as it was printed."
                if self.request.session.get(SET_PASSWORD)
                else "That is not your current password: type it again."
            ),
        }
        return form

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["one_time"] = bool(self.request.session.get(SET_PASSWORD))
        return context


def login_keys(request: HttpRequest) -> list[tuple[str, int]]:
    """Failures count per user *and* address (a stranger elsewhere cannot lock a reviewer out),
    and per address (one place cannot try many users)."""
    username = str(request.POST.get("username", "")).strip().lower()[:150]
    address = client_address(request)
    return [
        (f"login-failures:user:{username}:address:{address}", LOGIN_FAILURES),
        (f"login-failures:address:{address}", LOGIN_FAILURES_PER_ADDRESS),
    ]


def client_address(request: HttpRequest) -> str:
    """Who is signing in. Behind the proxy every request comes from it: the client is the last
    address it appended to X-Forwarded-For (earlier entries are the client's own say-so)."""
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if settings.BEHIND_PROXY and forwarded.strip():
        return forwarded.split(",")[-1].strip()
    return str(request.META.get("REMOTE_ADDR", ""))


def bump(key: str) -> int:
    """This try, counted; 0 when the cache is unreachable: sign-in goes on, unthrottled."""
    try:
        cache.add(key, 0, LOGIN_WINDOW_SECONDS)
        try:
            return int(cache.incr(key))
        except ValueError:  # expired between add and incr
            cache.set(key, 1, LOGIN_WINDOW_SECONDS)
            return 1
    except Exception as exc:  # the cache backend's own errors
        log.warning("cache unreachable, sign-in not throttled: %s", exc)
        return 0


def forget(keys: list[tuple[str, int]]) -> None:
    """A sign-in that worked: the person's failures are forgotten, and it was no failure of the
    address's (people behind one address sign in all day)."""
    try:
        cache.delete(keys[0][0])
        cache.decr(keys[1][0])
    except ValueError:
        pass  # expired meanwhile
    except Exception as exc:
        log.warning("cache unreachable, sign-in not throttled: %s", exc)
