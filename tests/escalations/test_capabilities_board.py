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


def test_marking_it_up_again_from_a_stale_page_changes_nothing_and_says_so(client, alice, outage):
    client.force_login(alice)
    from django.test import TestCase

    with TestCase.captureOnCommitCallbacks(execute=True):
        client.post(f"/capabilities/{outage.pk}/", {"status": "up", "reason": "forge is back"})
    stale = client.post(f"/capabilities/{outage.pk}/", {"status": "up", "reason": "it is back"})
    assert stale.status_code == 409
    page = stale.content.decode()
    assert (
        "forge is already up since " in page and ", by manager:alice: nothing was changed." in page
    )
    outage.refresh_from_db()
    assert (outage.status, outage.reason) == ("up", "forge is back")


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


@pytest.mark.postgres
def test_a_worker_far_behind_is_found_by_one_change_not_by_reading_them_all(client, bob, outage):
    """3,000 changes waiting for the worker: the board reads one to say it is re-evaluating."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from runs.models import FrontierChange, Run
    from tests.plans import rows_read

    run = Run.objects.get(key="r1")
    FrontierChange.objects.bulk_create(FrontierChange(run=run, keys=[]) for _ in range(3_000))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_frontierchange")
    client.force_login(bob)

    with CaptureQueriesContext(connection) as queries:
        page = client.get("/capabilities/").content.decode()

    assert "re-evaluating" in page
    (asked,) = [q["sql"] for q in queries.captured_queries if '"runs_frontierchange"' in q["sql"]]
    assert rows_read(asked) <= 10, asked


# Uncertainty: what nobody reported, and roles nobody named.


@pytest.fixture
def unreported(planner, coder):
    planner.post(
        "run.started",
        {"run": "r1", "tasks": [task("publish", capabilities=["forge"], effect="external")]},
    )
    return Capability.objects.get(name="forge")


def test_a_capability_nobody_reported_on_shows_as_unknown_and_can_be_reported_either_way(
    client, alice, unreported
):
    client.force_login(alice)
    page = client.get("/capabilities/").content.decode()
    assert '<span class="badge badge-unknown">unknown</span>' in page
    assert "nobody has reported on it" in page
    assert "Mark forge up</button>" in page and "Mark forge down</button>" in page

    response = client.post(
        f"/capabilities/{unreported.pk}/", {"status": "down", "reason": "forge 503s"}
    )
    assert response.status_code == 302
    unreported.refresh_from_db()
    assert unreported.status == "down"


def test_a_manager_cannot_set_a_capability_back_to_unknown(client, alice, unreported):
    client.force_login(alice)
    response = client.post(f"/capabilities/{unreported.pk}/", {"status": "unknown", "reason": "x"})
    assert response.status_code == 422
    assert "Choose up or down" in response.content.decode()


def test_the_board_names_the_roles_a_fleet_leaves_unnamed(client, bob, fleet, planner):
    planner.post(
        "capability.changed",
        {"capability": "iam", "status": "up", "reason": "ok", "role": "authority"},
    )
    client.force_login(bob)
    page = client.get("/capabilities/").content.decode()
    assert "authority <code>iam</code>" in page
    assert (
        "No observability or rollback capability is named: external effects are not held back "
        "on their state, which nobody reports." in page
    )
    assert "The setting is off; managers change it." in page


def test_a_manager_makes_unnamed_roles_stop_the_fleets_external_effects(
    client, alice, fleet, unreported, planner
):
    from django.test import TestCase

    planner.post("capability.changed", {"capability": "forge", "status": "up", "reason": "ok"})
    client.force_login(alice)
    page = client.get("/capabilities/").content.decode()
    assert "Stop acme's external effects while a role is unnamed</button>" in page

    with TestCase.captureOnCommitCallbacks(execute=True):
        response = client.post(f"/capabilities/fleets/{fleet.pk}/unnamed-roles-stop/", {"on": "1"})
    assert response.status_code == 302
    fleet.refresh_from_db()
    assert fleet.unnamed_roles_stop
    assert Blocker.objects.filter(
        task__key="publish", code="barrier:uncertain-dependency", cleared_at=None
    ).exists()
    page = client.get("/capabilities/").content.decode()
    assert (
        "No authority, observability or rollback capability is named: every external effect "
        "waits for a reviewer's release (1 task waiting)." in page
    )


def test_only_a_manager_changes_the_fleets_setting(client, bob, alice, fleet):
    client.force_login(bob)
    url = f"/capabilities/fleets/{fleet.pk}/unnamed-roles-stop/"
    assert client.post(url, {"on": "1"}).status_code == 403
    client.force_login(alice)
    assert client.post(url, {"on": "maybe"}).status_code == 422
    fleet.refresh_from_db()
    assert not fleet.unnamed_roles_stop


@pytest.mark.postgres
def test_what_a_capability_defers_is_read_from_its_own_blockers(client, bob, outage):
    """3,000 other open blockers are not read to count the one task the forge defers, nor the
    tasks a barrier stops."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from runs.models import Task
    from tests.plans import rows_read

    lint = Task.objects.get(key="lint")
    Blocker.objects.bulk_create(
        Blocker(task=lint, code=f"prerequisite:p{n}", set_at=timezone.now()) for n in range(3_000)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_blocker")
    client.force_login(bob)

    with CaptureQueriesContext(connection) as queries:
        page = client.get("/capabilities/").content.decode()

    assert "1 task in 1 run" in page
    counted = [q["sql"] for q in queries.captured_queries if '"runs_blocker"' in q["sql"]]
    assert len(counted) == 2  # what each capability defers; what unnamed roles stop
    for sql in counted:
        assert rows_read(sql) <= 10, sql
