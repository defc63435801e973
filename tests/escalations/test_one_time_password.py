"""member_add's printed password opens one session, which must set the user's own password."""

import io
import json

import pytest
from django.core.management import call_command
from django.test import Client

from fleet import services
from fleet.models import OneTimePassword

pytestmark = pytest.mark.django_db

OWN = "a long passphrase of my own"


def printed_password(username: str) -> str:
    services.fleet_create(name="acme")
    out = io.StringIO()
    call_command("member_add", username, "--fleet", "acme", "--role", "reviewer", stdout=out)
    return json.loads(out.getvalue())["password"]


def test_signing_in_with_the_printed_password_asks_for_ones_own_before_anything_else():
    password = printed_password("rita")
    browser = Client()
    signed = browser.post("/login/", {"username": "rita", "password": password}, follow=True)
    assert signed.redirect_chain[-1][0] == "/password/"
    assert "<h1>Set your password</h1>" in signed.content.decode()
    assert browser.get("/escalations/")["Location"] == "/password/"
    poll = browser.get("/escalations/", HTTP_HX_REQUEST="true")
    assert poll["HX-Redirect"] == "/password/"

    done = browser.post(
        "/password/",
        {"old_password": password, "new_password1": OWN, "new_password2": OWN},
        follow=True,
    )
    assert done.redirect_chain[-1][0] == "/"
    assert "Your password is set" in done.content.decode()
    assert browser.get("/escalations/").status_code == 200
    assert not OneTimePassword.objects.exists()


def test_the_one_time_password_stops_working_once_replaced():
    password = printed_password("rita")
    browser = Client()
    browser.post("/login/", {"username": "rita", "password": password})
    browser.post(
        "/password/", {"old_password": password, "new_password1": OWN, "new_password2": OWN}
    )
    again = Client().post("/login/", {"username": "rita", "password": password})
    assert (
        again.status_code == 200
        and "enter a correct username and password" in again.content.decode()
    )
    assert Client().post("/login/", {"username": "rita", "password": OWN}).status_code == 302


def test_a_weak_or_mismatched_new_password_is_refused_saying_why():
    password = printed_password("rita")
    browser = Client()
    browser.post("/login/", {"username": "rita", "password": password})
    weak = browser.post(
        "/password/", {"old_password": password, "new_password1": "abc", "new_password2": "abc"}
    )
    assert weak.status_code == 200 and "too short" in weak.content.decode()
    mismatched = browser.post(
        "/password/", {"old_password": password, "new_password1": OWN, "new_password2": OWN + "!"}
    )
    assert (
        "didn’t match" in mismatched.content.decode()
        or "didn't match" in mismatched.content.decode()
    )
    assert OneTimePassword.objects.exists()
    assert browser.get("/escalations/")["Location"] == "/password/"


def test_an_existing_user_added_to_another_fleet_keeps_their_password():
    printed_password("rita")
    services.fleet_create(name="globex")
    out = io.StringIO()
    call_command("member_add", "rita", "--fleet", "globex", "--role", "manager", stdout=out)
    assert json.loads(out.getvalue())["password"] is None
    assert OneTimePassword.objects.count() == 1


def test_the_one_time_password_signs_in_once_and_its_session_reads_nothing_else():
    from escalations.models import Escalation  # noqa: F401 - the API's routes are loaded

    password = printed_password("rita")
    browser = Client()
    assert browser.post("/login/", {"username": "rita", "password": password}).status_code == 302
    api = browser.get("/api/v1/runs/anything")
    assert api.status_code == 403
    assert api.json()["errors"][0] == {
        "loc": "password",
        "msg": "set your own password first, at /password/",
    }
    again = Client().post("/login/", {"username": "rita", "password": password})
    assert again.status_code == 200
    assert "This one-time password has been used" in again.content.decode()


def test_a_new_one_time_password_replaces_a_used_one():
    used = printed_password("rita")
    Client().post("/login/", {"username": "rita", "password": used})
    out = io.StringIO()
    call_command(
        "member_add", "rita", "--fleet", "acme", "--role", "reviewer", "--new-password", stdout=out
    )
    fresh = json.loads(out.getvalue())["password"]
    assert fresh and fresh != used
    assert Client().post("/login/", {"username": "rita", "password": used}).status_code == 200
    browser = Client()
    signed = browser.post("/login/", {"username": "rita", "password": fresh}, follow=True)
    assert signed.redirect_chain[-1][0] == "/password/"
