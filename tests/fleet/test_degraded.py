"""The cache or the broker unreachable is never the reason for a 500: the work goes on."""

import pytest
from django.test import Client
from kombu.exceptions import OperationalError

from fleet.models import Event
from runs.models import FrontierChange, Run
from tests.conftest import task
from tests.escalations.test_queue import PASSWORD

# Nothing listens on port 1: every cache call fails with a connection error.
UNREACHABLE_CACHE = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://127.0.0.1:1/0",
        "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2},
    }
}


@pytest.fixture
def cache_down(settings):
    settings.CACHES = UNREACHABLE_CACHE


def test_with_the_cache_down_a_signed_event_is_applied_unthrottled(planner, coder, cache_down):
    response = planner.post("run.started", {"run": "r1", "tasks": [task("a")]})
    assert response.status_code == 202, response.content
    assert Run.objects.filter(key="r1").exists()


def test_with_the_cache_down_a_reviewer_still_signs_in(alice, cache_down):
    response = Client().post("/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 302


def test_an_enqueue_that_fails_after_commit_is_answered_202_and_left_to_the_reconciler(
    planner, coder, monkeypatch
):
    def broker_down(*args, **kwargs):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr("runs.tasks.recompute.delay", broker_down)
    response = planner.post("run.started", {"run": "r1", "tasks": [task("a")]})
    assert response.status_code == 202, response.content
    event = Event.objects.get(type="run.started")
    assert event.response_status == 202
    # What the lost message stood for is in the database, for the reconciler to enqueue again.
    assert FrontierChange.objects.filter(run__key="r1").exists()


def test_a_tasks_own_error_in_eager_mode_still_propagates(planner, coder, monkeypatch):
    def bug(*args, **kwargs):
        raise ZeroDivisionError("a bug, not an outage")

    monkeypatch.setattr("runs.tasks.recompute.delay", bug)
    with pytest.raises(ZeroDivisionError):
        planner.post("run.started", {"run": "r1", "tasks": [task("a")]})


def test_a_stranger_elsewhere_cannot_lock_a_reviewer_out(alice):
    stranger = Client(REMOTE_ADDR="203.0.113.9")
    for _ in range(10):
        stranger.post("/login/", {"username": "alice", "password": "guess"})
    assert stranger.post("/login/", {"username": "alice", "password": PASSWORD}).status_code == 429
    at_her_desk = Client(REMOTE_ADDR="198.51.100.7")
    assert (
        at_her_desk.post("/login/", {"username": "alice", "password": PASSWORD}).status_code == 302
    )


def test_people_behind_one_address_who_sign_in_are_not_counted_as_failures(alice):
    from escalations.views.sign_in import LOGIN_FAILURES_PER_ADDRESS

    office = Client(REMOTE_ADDR="192.0.2.10")
    for _ in range(LOGIN_FAILURES_PER_ADDRESS + 5):
        response = office.post("/login/", {"username": "alice", "password": PASSWORD})
        assert response.status_code == 302
        office.logout()
