"""Signing in, with a throttle on failures, and setting a one-time password's own password."""

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
