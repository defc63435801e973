"""A reviewer verifies or refutes a claim by hand, from the packet or the run page: the verdict is
`human_answer` evidence from `reviewer:<user>`, and the frontier is recomputed after it."""

import pytest

from fleet.models import Delivery
from runs.models import Claim, Evidence, Run, Task
from tests.conftest import committed, signed_in
from tests.escalations.desk import Desk, member

pytestmark = pytest.mark.django_db

RUN = "tier-discounts"


@pytest.fixture
def desk(client, fleet):
    desk = Desk(client, fleet)
    desk.run(
        RUN,
        tasks=[
            {"key": "plan", "agent": "planner"},
            {
                "key": "build",
                "agent": "coder",
                "prerequisites": ["plan"],
                "consumes": ["plan.tier"],
            },
            {"key": "schema", "agent": "coder-b"},
        ],
    )
    # The planner hands over a claim with nothing a verifier can re-run: it stays unverified.
    desk.planner.post(
        "task.started",
        {"run": RUN, "task": "plan", "attempt": {"prompt_hash": "p1", "context_hash": "c1"}},
    )
    desk.planner.post(
        "claim.posted",
        {"run": RUN, "task": "plan", "claim": {"key": "plan.tier", "statement": "tier exists"}},
    )
    desk.planner.post("task.finished", {"run": RUN, "task": "plan", "outcome": "succeeded"})
    return desk


def packet_showing_the_claim(desk):
    """schema's escalation, its packet listing plan.tier (a claim schema consumes)."""
    escalation = desk.escalate("schema", run=RUN)
    Task.objects.filter(key="schema").update(consumes=["plan.tier"])
    return escalation


def open_blockers(key):
    task = Task.objects.get(key=key)
    return sorted(task.blockers.filter(cleared_at=None).values_list("code", flat=True))


def test_verifying_a_claim_on_the_run_page_releases_its_consumer(desk, alice):
    claim = Claim.objects.get(key="plan.tier")
    run = Run.objects.get(key=RUN)
    assert open_blockers("build") == ["claim:plan.tier"]
    browser = signed_in(alice)
    page = browser.get(f"/runs/{run.pk}/").content.decode()
    assert 'Verify or refute<span class="visually-hidden"> plan.tier</span> by hand' in page

    response = committed(
        browser.post,
        f"/runs/{run.pk}/claims/{claim.pk}/check/",
        {"verdict": "verified", "note": "SELECT tier FROM customers returned 2 rows"},
    )
    assert response.status_code == 302
    assert response["Location"] == f"/runs/{run.pk}/#claim-{claim.pk}"
    claim.refresh_from_db()
    assert (claim.status, claim.checked_by) == ("verified", "reviewer:alice")
    evidence = Evidence.objects.get(claim=claim, kind="human_answer")
    assert (evidence.source, evidence.verdict, evidence.role) == (
        "reviewer:alice",
        "verified",
        "check",
    )
    assert evidence.payload == {
        "verdict": "verified",
        "note": "SELECT tier FROM customers returned 2 rows",
    }
    # The recompute ran after the commit: the coder may start.
    build = Task.objects.get(key="build")
    assert build.ready and open_blockers("build") == []
    page = browser.get(response["Location"]).content.decode()
    assert "verified by hand by alice: SELECT tier FROM customers returned 2 rows" in page


def test_refuting_a_claim_on_the_packet_sends_its_task_back(desk, alice):
    escalation = packet_showing_the_claim(desk)
    claim = Claim.objects.get(key="plan.tier")
    response = committed(
        signed_in(alice).post,
        f"/escalations/{escalation.pk}/claims/{claim.pk}/check/",
        {"verdict": "refuted", "note": "customers has no tier column"},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert page.lstrip().startswith('<article id="packet"')  # the whole packet, up to date
    row = page[page.index(f'id="claim-{claim.pk}"') :]
    assert "badge-refuted" in row and "refuted by hand by alice" in row
    claim.refresh_from_db()
    assert claim.status == "refuted"
    # A refuted claim is a loud failure of the task that posted it: plan is sent back.
    assert Task.objects.get(key="plan").state != "succeeded"
    assert "claim:plan.tier" in open_blockers("build")


@pytest.mark.parametrize(
    ("form", "status", "message"),
    [
        ({"verdict": "", "note": "x"}, 422, "Choose a verdict: verified or refuted."),
        ({"verdict": "maybe", "note": "x"}, 422, "Choose a verdict: verified or refuted."),
        (
            {"verdict": "verified", "note": "  "},
            422,
            "Say what you checked to find plan.tier verified",
        ),
        ({"verdict": "verified", "note": "x" * 1001}, 422, "it may have at most 1,000"),
    ],
)
def test_a_bad_verdict_is_refused_saying_why(desk, alice, form, status, message):
    claim = Claim.objects.get(key="plan.tier")
    run = Run.objects.get(key=RUN)
    browser = signed_in(alice)
    response = browser.post(f"/runs/{run.pk}/claims/{claim.pk}/check/", form)
    assert response.status_code == 302
    assert response["Location"] == f"/runs/{run.pk}/#claim-{claim.pk}"
    page = browser.get(response["Location"]).content.decode()
    row = page[page.index(f'id="claim-{claim.pk}"') :]
    assert message in row and '<details class="by-hand" open>' in row
    if form["note"].strip():
        assert form["note"] in row  # the draft is kept
    assert message not in browser.get(response["Location"]).content.decode()  # once

    escalation = packet_showing_the_claim(desk)
    packet = browser.post(
        f"/escalations/{escalation.pk}/claims/{claim.pk}/check/", form, HTTP_HX_REQUEST="true"
    )
    assert packet.status_code == status and message in packet.content.decode()
    assert Claim.objects.get(pk=claim.pk).status == "unverified"


def test_the_same_verdict_again_is_refused(desk, alice):
    claim = Claim.objects.get(key="plan.tier")
    run = Run.objects.get(key=RUN)
    browser = signed_in(alice)
    url = f"/runs/{run.pk}/claims/{claim.pk}/check/"
    committed(browser.post, url, {"verdict": "verified", "note": "checked the table"})
    response = browser.post(url, {"verdict": "verified", "note": "again"})
    page = browser.get(response["Location"]).content.decode()
    assert "plan.tier is already verified (verified by hand by alice: checked the table)" in page
    assert Evidence.objects.filter(claim=claim, kind="human_answer").count() == 1


def test_a_verdict_from_a_page_older_than_anothers_verdict_is_refused_keeping_the_note(desk, alice):
    """Two reviewers had the run page open: the first verifies, the second, still seeing the
    claim unverified, refutes. The second is told what changed; nothing is overwritten and the
    planner is not sent back."""
    bob = member("bob", desk.fleet)
    claim = Claim.objects.get(key="plan.tier")
    run = Run.objects.get(key=RUN)
    url = f"/runs/{run.pk}/claims/{claim.pk}/check/"
    late_browser = signed_in(bob)
    page = late_browser.get(f"/runs/{run.pk}/").content.decode()
    assert '<input type="hidden" name="seen" value="unverified">' in page
    seen = {"seen": "unverified"}
    committed(signed_in(alice).post, url, {"verdict": "verified", "note": "checked", **seen})

    late = {"verdict": "refuted", "note": "stale page: I think it is refuted", **seen}
    response = committed(late_browser.post, url, late)
    page = late_browser.get(response["Location"]).content.decode()
    assert (
        "plan.tier changed since your page showed it unverified: it is verified now "
        "(verified by hand by alice: checked)"
    ) in page
    assert "stale page: I think it is refuted</textarea>" in page  # the note is kept
    claim.refresh_from_db()
    assert (claim.status, claim.checked_by) == ("verified", "reviewer:alice")
    assert Evidence.objects.filter(claim=claim, kind="human_answer").count() == 1
    assert not Task.objects.get(key="plan").decisions.exists()


def test_a_finished_runs_claims_are_not_checked_by_hand(desk, alice):
    claim = Claim.objects.get(key="plan.tier")
    run = Run.objects.get(key=RUN)
    browser = signed_in(alice)
    Run.objects.filter(pk=run.pk).update(state="failed", cause="dropped")
    assert "by hand" not in browser.get(f"/runs/{run.pk}/").content.decode()
    response = browser.post(
        f"/runs/{run.pk}/claims/{claim.pk}/check/", {"verdict": "verified", "note": "x"}
    )
    page = browser.get(response["Location"]).content.decode()
    assert "The run has failed (dropped): a verdict now would change nothing." in page


def test_a_manager_cannot_check_a_claim_by_hand(desk, fleet):
    carol = member("carol", fleet, role="manager")
    claim = Claim.objects.get(key="plan.tier")
    run = Run.objects.get(key=RUN)
    browser = signed_in(carol)
    assert "by hand" not in browser.get(f"/runs/{run.pk}/").content.decode()
    response = browser.post(
        f"/runs/{run.pk}/claims/{claim.pk}/check/", {"verdict": "verified", "note": "x"}
    )
    assert response.status_code == 403
    assert "Only a reviewer of fleet acme can act" in response.content.decode()
    assert f'<a href="/runs/{run.pk}/">Back to the run</a>' in response.content.decode()
    escalation = desk.escalate("schema", run=RUN)
    packet = browser.post(
        f"/escalations/{escalation.pk}/claims/{claim.pk}/check/",
        {"verdict": "verified", "note": "x"},
    )
    assert packet.status_code == 403
    assert Claim.objects.get(pk=claim.pk).status == "unverified"


def test_a_claim_of_another_run_is_not_found(desk, alice):
    claim = Claim.objects.get(key="plan.tier")
    desk.run("other", tasks=[{"key": "x", "agent": "coder"}])
    other = Run.objects.get(key="other")
    response = signed_in(alice).post(
        f"/runs/{other.pk}/claims/{claim.pk}/check/", {"verdict": "verified", "note": "x"}
    )
    assert response.status_code == 404


def test_without_htmx_a_verdict_on_the_packet_ends_on_the_packet(desk, alice):
    escalation = packet_showing_the_claim(desk)
    claim = Claim.objects.get(key="plan.tier")
    browser = signed_in(alice)
    url = f"/escalations/{escalation.pk}/claims/{claim.pk}/check/"
    refused = browser.post(url, {"verdict": "verified", "note": ""})
    assert refused["Location"] == f"/escalations/{escalation.pk}/#claim-{claim.pk}"
    page = browser.get(refused["Location"]).content.decode()
    row = page[page.index(f'id="claim-{claim.pk}"') :]
    assert "Say what you checked to find plan.tier verified" in row
    done = committed(browser.post, url, {"verdict": "verified", "note": "looked at the table"})
    assert done["Location"] == f"/escalations/{escalation.pk}/"
    assert Claim.objects.get(pk=claim.pk).status == "verified"


def test_a_task_told_it_was_ready_is_told_it_is_deferred_when_a_refutation_sends_its_prerequisite_back(
    desk, alice, fleet
):
    fleet.callback_url = "http://127.0.0.1:9/hook"
    fleet.save()
    desk.run("second", tasks=[{"key": "plan", "agent": "planner"},
                              {"key": "ship", "agent": "coder", "prerequisites": ["plan"],
                               "consumes": []}])  # fmt: skip
    attempt = {"prompt_hash": "p1", "context_hash": "c1"}
    desk.planner.post("task.started", {"run": "second", "task": "plan", "attempt": attempt})
    claim = {"key": "plan.rate", "statement": "the rate is 5%"}
    desk.planner.post("claim.posted", {"run": "second", "task": "plan", "claim": claim})
    committed(
        desk.planner.post,
        "task.finished",
        {"run": "second", "task": "plan", "outcome": "succeeded"},
    )
    ship = Task.objects.get(run__key="second", key="ship")
    assert ship.ready
    assert Delivery.objects.filter(type="task.ready", payload__data__task="ship").exists()

    run = Run.objects.get(key="second")
    refuted = Claim.objects.get(run=run, key="plan.rate")
    committed(
        signed_in(alice).post,
        f"/runs/{run.pk}/claims/{refuted.pk}/check/",
        {"verdict": "refuted", "note": "the rate is 7%"},
    )
    ship.refresh_from_db()
    assert not ship.ready
    deferred = Delivery.objects.get(type="task.deferred", payload__data__task="ship")
    assert deferred.payload["data"]["blockers"] == ["prerequisite:plan"]
