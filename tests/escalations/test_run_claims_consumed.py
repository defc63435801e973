"""The run page on who consumes a claim: a reviewer makes a claim load-bearing (never lowered),
a halted task and what it holds, a task's declared consumes and checks."""

import pytest
from django.test import TestCase

from fleet.models import Delivery
from runs.claims.by_hand import check_by_hand
from runs.models import Claim, Run, Task
from tests.conftest import REFUSED_CALLBACK, committed, signed_in
from tests.escalations.desk import Desk, member

pytestmark = pytest.mark.django_db

RUN = "notes"
CLAIM = "plan.cache-warm"
ATTEMPT = {"prompt_hash": "p", "context_hash": "c"}


@pytest.fixture
def desk(client, fleet):
    fleet.callback_url = REFUSED_CALLBACK
    fleet.save()
    desk = Desk(client, fleet)
    desk.run(
        RUN,
        tasks=[
            {"key": "plan", "agent": "planner"},
            {"key": "check", "agent": "coder", "prerequisites": ["plan"], "checks": [CLAIM]},
            {"key": "later", "agent": "coder", "consumes": [CLAIM], "prerequisites": ["check"]},
            {"key": "aside", "agent": "coder-b", "consumes": []},
        ],
    )
    return desk


def post_claim(desk, load_bearing: bool) -> Claim:
    desk.planner.post("task.started", {"run": RUN, "task": "plan", "attempt": ATTEMPT})
    claim = {"key": CLAIM, "statement": "the cache is warm", "load_bearing": load_bearing}
    desk.planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": claim})
    return Claim.objects.get(key=CLAIM)


def raise_it(browser, claim):
    run = Run.objects.get(key=RUN)
    with TestCase.captureOnCommitCallbacks(execute=True):
        return browser.post(f"/runs/{run.pk}/claims/{claim.pk}/load-bearing/")


def test_a_task_that_names_a_claim_raises_it_and_the_page_says_who(desk, alice):
    claim = post_claim(desk, load_bearing=False)
    assert (claim.load_bearing, claim.raised_by) == (True, "consumed by later")
    page = signed_in(alice).get(f"/runs/{claim.run_id}/").content.decode()
    assert "load-bearing (raised: consumed by later)" in page
    assert "Make load-bearing" not in page


def test_a_reviewer_makes_a_claim_load_bearing_once(desk, alice):
    Task.objects.filter(key="later").update(consumes=[])  # nothing consumes it now
    claim = post_claim(desk, load_bearing=False)
    assert not claim.load_bearing
    browser = signed_in(alice)
    page = browser.get(f"/runs/{claim.run_id}/").content.decode()
    assert f'Make load-bearing<span class="visually-hidden"> {CLAIM}</span>' in page

    response = raise_it(browser, claim)

    assert response.status_code == 302
    assert response["Location"] == f"/runs/{claim.run_id}/#claim-{claim.pk}"
    claim.refresh_from_db()
    assert (claim.load_bearing, claim.raised_by) == (True, "reviewer:alice")
    again = raise_it(browser, claim)
    page = browser.get(again["Location"]).content.decode()
    assert f"{CLAIM} is load-bearing already (raised: reviewer:alice)." in page


def test_a_manager_cannot_make_a_claim_load_bearing(desk):
    Task.objects.filter(key="later").update(consumes=[])
    claim = post_claim(desk, load_bearing=False)
    manager = member("mallory", desk.fleet, role="manager")

    response = raise_it(signed_in(manager), claim)

    assert response.status_code == 403
    assert not Claim.objects.get(pk=claim.pk).load_bearing


def test_the_page_shows_a_halted_task_declared_consumes_and_checks(desk, alice):
    claim = post_claim(desk, load_bearing=True)
    desk.planner.post("task.finished", {"run": RUN, "task": "plan", "outcome": "succeeded"})
    committed(check_by_hand, claim=claim, reviewer=alice, verdict="verified", note="looked")
    assert (
        desk.coder.post(
            "task.started", {"run": RUN, "task": "check", "attempt": ATTEMPT}
        ).status_code
        == 202
    )
    assert (
        desk.coder_b.post(
            "task.started",
            {"run": RUN, "task": "aside", "attempt": ATTEMPT, "consumes": [CLAIM]},
        ).status_code
        == 202
    )
    committed(check_by_hand, claim=claim, reviewer=alice, verdict="refuted", note="it is cold")

    page = signed_in(alice).get(f"/runs/{claim.run_id}/").content.decode()
    aside = page[page.index('id="task-aside"') :]
    assert f'<strong class="halted">halted</strong> on <code>{CLAIM}</code> (attempt 1)' in aside
    assert "consumes no claim (declared)" in aside
    check = page[page.index('id="task-check"') : page.index('id="task-later"')]
    assert f"checks <code>{CLAIM}</code>" in check and "halted" not in check
    assert Delivery.objects.filter(type="task.halted", payload__data__task="aside").exists()
