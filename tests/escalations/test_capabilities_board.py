"""The capabilities board: state, since when, what it defers; managers change it with a reason."""

import pytest

from fleet import services
from fleet.models import Capability
from runs.models import Blocker
from tests.conftest import task

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(fleet):
    """A manager of the fleet."""
    user, _ = services.member_add(username="alice", fleet=fleet, role="manager")
    return user


@pytest.fixture
def bob(fleet):
    """A reviewer of the fleet."""
    user, _ = services.member_add(username="bob", fleet=fleet, role="reviewer")
    return user


@pytest.fixture
def outage(planner, coder):
    planner.post(
        "run.started", {"run": "r1", "tasks": [task("push", capabilities=["forge"]), task("lint")]}
    )
    planner.post(
        "capability.changed", {"capability": "forge", "status": "down", "reason": "forge 503s"}
    )
    return Capability.objects.get(name="forge")


def test_it_shows_each_capability_with_what_it_defers(client, bob, outage):
    client.force_login(bob)
    page = client.get("/capabilities/").content.decode()
    assert "forge" in page and "down" in page and "forge 503s" in page
    assert "1 task in 1 run" in page
    assert "managers only" in page


def test_a_manager_marks_a_capability_up_with_a_reason_and_work_is_released(client, alice, outage):
    client.force_login(alice)
    from django.test import TestCase

    with TestCase.captureOnCommitCallbacks(execute=True):
        response = client.post(
            f"/capabilities/{outage.pk}/", {"status": "up", "reason": "forge is back"}
        )
    assert response.status_code == 302
    outage.refresh_from_db()
    assert (outage.status, outage.reason, outage.changed_by) == (
        "up",
        "forge is back",
        "manager:alice",
    )
    assert not Blocker.objects.filter(code="capability:forge", cleared_at=None).exists()


def test_a_change_without_a_reason_is_refused_saying_why(client, alice, outage):
    client.force_login(alice)
    response = client.post(f"/capabilities/{outage.pk}/", {"status": "up", "reason": " "})
    assert response.status_code == 422
    assert "Say why" in response.content.decode()
    outage.refresh_from_db()
    assert outage.status == "down"


def test_a_bad_status_is_refused(client, alice, outage):
    client.force_login(alice)
    response = client.post(f"/capabilities/{outage.pk}/", {"status": "sideways", "reason": "x"})
    assert response.status_code == 422
    assert "Choose up or down" in response.content.decode()


def test_a_reviewer_cannot_change_a_capability(client, bob, outage):
    client.force_login(bob)
    response = client.post(f"/capabilities/{outage.pk}/", {"status": "up", "reason": "x"})
    assert response.status_code == 403
    outage.refresh_from_db()
    assert outage.status == "down"


def test_another_fleets_capability_is_404(client, outage):
    other = services.fleet_create(name="other")
    charlie, _ = services.member_add(username="charlie", fleet=other, role="manager")
    client.force_login(charlie)
    assert "forge" not in client.get("/capabilities/").content.decode()
    assert (
        client.post(f"/capabilities/{outage.pk}/", {"status": "up", "reason": "x"}).status_code
        == 404
    )


def test_the_board_needs_a_sign_in(client):
    response = client.get("/capabilities/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_while_the_work_is_re_evaluated_the_board_says_so_and_polls_itself(client, bob, outage):
    from runs.models import FrontierChange, Run

    FrontierChange.objects.create(run=Run.objects.get(key="r1"))  # a recompute still owed
    client.force_login(bob)
    page = client.get("/capabilities/").content.decode()
    assert "re-evaluating" in page and 'hx-trigger="every 2s"' in page
    assert "1 task in 1 run" not in page

    FrontierChange.objects.all().delete()  # the worker caught up
    page = client.get("/capabilities/").content.decode()
    assert "re-evaluating" not in page and "hx-trigger" not in page
    assert "1 task in 1 run" in page
