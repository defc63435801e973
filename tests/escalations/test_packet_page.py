"""The packet page: the question first with the answer form under it, the packet, and the other
actions (reroute, return, abort, re-check). Packet content is untrusted."""

import re

import pytest
from django.test import Client, TestCase

from escalations.models import Escalation
from fleet.models import Delivery
from runs.models import Claim, Decision, Evidence, Run, Task
from tests.conftest import REFUSED_CALLBACK, committed
from tests.escalations.desk import HASH, OPTIONS, QUESTION, member

pytestmark = pytest.mark.django_db


@pytest.fixture
def desk_callback_url():
    return REFUSED_CALLBACK


def escaped(text):
    return text.replace("'", "&#x27;")


def test_the_question_is_the_heading_and_the_answer_form_is_right_under_it(desk, browser):
    escalation = desk.escalate(options=OPTIONS)
    page = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    heading = re.search(r"<h1[^>]*>(.*?)</h1>", page, re.S).group(1)
    assert heading == escaped(QUESTION)
    assert page.index("<h1") < page.index('id="answer-form"') < page.index('id="tried"')
    form = page[
        page.index('id="answer-form"') : page.index("</form>", page.index('id="answer-form"'))
    ]
    assert '<label for="answer-text">Answer</label>' in form
    assert '<textarea id="answer-text" name="text"' in form
    for i, option in enumerate(OPTIONS, start=1):
        assert f'type="radio" name="option" id="option-{i}" value="{option}"' in form
        assert f'<label for="option-{i}">{option}</label>' in form
    assert '<button type="submit" class="primary">Answer and release</button>' in form


def test_it_shows_what_was_tried_ruled_out_and_the_evidence(desk, browser):
    escalation = desk.escalate()
    page = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    assert "Reframed with live schema from information_schema" in page
    assert "column exists under another name" in page
    assert "searched customers, accounts, loyalty_* for tier-like columns; none found" in page
    assert "SELECT column_name FROM information_schema.columns" in page and HASH in page
    release = page[page.index('id="release"') : page.index('id="blast"')]
    # The coders wait for plan itself to run again: the answer makes only plan ready.
    assert "<strong>plan</strong>" in release and "discount-resolver" not in release
    history = page[page.index('id="history"') :]
    assert "attempt 1 started" in history and "packet from planner" in history
    escalation.refresh_from_db()
    assert escalation.packet_opened_at is not None and escalation.first_looked_at is not None


def test_packet_content_is_rendered_as_text_and_links_are_inert(desk, browser):
    escalation = desk.escalate(
        smallest_unblocking_question="Is <script>alert('x')</script> the tier source?",
        tried=['<a href="javascript:alert(1)">click</a>', "see https://evil.example/steal"],
        ruled_out=[{"hypothesis": "<img src=x onerror=alert(1)>", "how": "<b>bold</b>"}],
    )
    page = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "<script>alert" not in page
    assert 'href="javascript:' not in page and "<img src=x" not in page and "<b>bold" not in page
    assert 'href="https://evil.example' not in page
    assert "see https://evil.example/steal" in page  # shown, not linked


def test_claims_show_their_status_blast_radius_and_a_recheck_button(desk, browser):
    desk.planner.post(
        "claim.posted",
        {
            "run": "tier-discounts",
            "task": "plan",
            "claim": {
                "key": "plan.customer-tier",
                "statement": "`customers` has a `customer_tier` column",
                "load_bearing": True,
                "evidence": {"kind": "query_result", "source": "SELECT 1", "payload_hash": HASH},
            },
        },
    )
    escalation = desk.escalate()
    claim = Claim.objects.get(key="plan.customer-tier")
    assert claim.status == "unverified"  # no data source registered: no verifier could reach it
    page = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    row = page[page.index(f'id="claim-{claim.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "plan.customer-tier" in row and ">unverified<" in row
    assert "Re-check<span" in row
    assert "0 agents, 0 artifacts" in row


def test_recheck_sends_the_claim_back_to_the_verifier(desk, browser):
    desk.planner.post(
        "claim.posted",
        {
            "run": "tier-discounts",
            "task": "plan",
            "claim": {
                "key": "plan.tier",
                "statement": "`tier` exists",
                "evidence": {"kind": "query_result", "source": "SELECT 1", "payload_hash": HASH},
            },
        },
    )
    escalation = desk.escalate()
    claim = Claim.objects.get(key="plan.tier")
    response = committed(
        browser.post,
        f"/escalations/{escalation.pk}/claims/{claim.pk}/recheck/",
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    assert response.content.decode().lstrip().startswith(f'<tr id="claim-{claim.pk}"')
    claim.refresh_from_db()
    # The verifier ran (eagerly here) and still could not reach a data source: it says so.
    assert claim.status == "unverified" and not claim.verification_pending
    assert "no verifier could check" in claim.status_reason
    posted = Evidence.objects.get(claim=claim, role="posted")
    assert posted.verdict == "unverified"
    polled = browser.get(f"/escalations/{escalation.pk}/claims/{claim.pk}/")
    assert polled.status_code == 286  # nothing pending: polling stops


def test_recheck_refuses_a_claim_with_nothing_to_check(desk, browser):
    desk.planner.post(
        "claim.posted",
        {
            "run": "tier-discounts",
            "task": "plan",
            "claim": {"key": "plan.bare", "statement": "trust me"},
        },
    )
    escalation = desk.escalate()
    claim = Claim.objects.get(key="plan.bare")
    response = browser.post(
        f"/escalations/{escalation.pk}/claims/{claim.pk}/recheck/", HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 422
    assert "Nothing a verifier can re-check" in response.content.decode()
    assert "without evidence" in response.content.decode()


def test_recheck_refuses_a_claim_already_checked(desk, browser):
    escalation = desk.escalate()
    committed(browser.post, f"/escalations/{escalation.pk}/answer/", {"text": "use loyalty points"})
    answer_claim = Claim.objects.get(key=f"answer.escalation-{escalation.pk}")
    url = f"/escalations/{escalation.pk}/claims/{answer_claim.pk}/recheck/"
    response = browser.post(url, HTTP_HX_REQUEST="true")
    assert response.status_code == 409
    assert "already verified" in response.content.decode()
    page = refused_without_htmx(browser, escalation, url, {}, anchor="evidence")
    evidence = page[page.index('id="evidence"') : page.index('id="release"')]
    assert "already verified" in evidence


def test_a_claim_of_another_run_is_not_found_from_this_packet(desk, browser, client, fleet):
    escalation = desk.escalate()
    desk.run("other", tasks=[{"key": "x", "agent": "coder"}])
    desk.coder.post(
        "claim.posted", {"run": "other", "task": "x", "claim": {"key": "c", "statement": "s"}}
    )
    other = Claim.objects.get(key="c")
    assert (
        browser.post(f"/escalations/{escalation.pk}/claims/{other.pk}/recheck/").status_code == 404
    )


def test_the_status_poll_stops_once_someone_has_acted(desk, browser, fleet):
    escalation = desk.escalate()
    open_now = browser.get(f"/escalations/{escalation.pk}/status/", HTTP_HX_REQUEST="true")
    assert open_now.status_code == 200 and "Nobody has claimed it" in open_now.content.decode()
    bob = Client()
    bob.force_login(member("bob", fleet))
    committed(bob.post, f"/escalations/{escalation.pk}/answer/", {"text": "loyalty points"})
    done = browser.get(f"/escalations/{escalation.pk}/status/", HTTP_HX_REQUEST="true")
    assert done.status_code == 286
    assert "Answered by bob at" in done.content.decode()
    assert "hx-trigger" not in done.content.decode()


def test_the_answer_form_says_when_another_reviewer_holds_the_claim(desk, browser, fleet):
    escalation = desk.escalate()
    bob = Client()
    bob.force_login(member("bob", fleet))
    bob.post(f"/escalations/{escalation.pk}/claim/")
    page = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    assert "your answer is refused until they release it or the claim expires" in page
    assert 'id="answer-form"' in page  # a draft can be written meanwhile
    mine = bob.get(f"/escalations/{escalation.pk}/").content.decode()
    assert "your answer is refused" not in mine


def test_a_status_poll_that_finds_nothing_changed_swaps_nothing(desk, browser, fleet):
    escalation = desk.escalate()
    page = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    seen = re.search(r"hx-vals='\{\"seen\": \"([^\"]*)\"\}'", page).group(1)
    url = f"/escalations/{escalation.pk}/status/"
    same = browser.get(url, {"seen": seen}, HTTP_HX_REQUEST="true")
    assert same.status_code == 204 and same.content == b""
    bob = Client()
    bob.force_login(member("bob", fleet))
    bob.post(f"/escalations/{escalation.pk}/claim/")
    changed = browser.get(url, {"seen": seen}, HTTP_HX_REQUEST="true")
    assert changed.status_code == 200
    assert "Claimed by bob" in changed.content.decode()


# Reroute, return, abort


def test_a_reviewer_reroutes_the_task_to_another_agent(desk, browser):
    escalation = desk.escalate()
    response = committed(
        browser.post,
        f"/escalations/{escalation.pk}/reroute/",
        {"agent": "coder", "note": "the planner keeps guessing; the coder can read the schema"},
    )
    assert response.status_code == 302
    task = Task.objects.get(key="plan")
    assert (task.agent.name, task.state) == ("coder", "pending")
    decision = Decision.objects.get(task=task, action="reroute")
    assert (
        decision.reroute_to == "coder"
        and "alice handed plan from planner to coder" in decision.reason
    )
    escalation.refresh_from_db()
    assert escalation.status == "closed" and escalation.claimed_by.username == "alice"
    rerouted = Delivery.objects.get(type="task.rerouted")
    assert rerouted.payload["data"]["to"] == "coder"
    page = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    assert "<strong>Rerouted to coder by alice.</strong>" in page
    outcome = page[page.index('class="outcome"') : page.index('id="status"')]
    assert "Rerouted to coder by alice</h2>" in outcome
    assert "the planner keeps guessing; the coder can read the schema" in outcome
    assert "Closed by" not in page
    assert "Nothing: it was closed without an answer." in section(page, "release", "blast")
    # The packet is still the planner's, who stopped with it: not the agent the task went to.
    crumbs = page[page.index('class="crumbs"') : page.index("</p>", page.index('class="crumbs"'))]
    assert "by planner · run" in crumbs


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"agent": "nobody", "note": "x"}, "Choose an agent of the fleet acme."),
        ({"agent": "planner", "note": "x"}, "plan is already planner&#x27;s"),
        ({"agent": "coder", "note": " "}, "Say why it goes to another agent"),
        (
            {"agent": "coder", "note": "y" * 1001},
            "The note is 1,001 characters; it may have at most",
        ),
    ],
)
def test_a_bad_reroute_is_refused_saying_why(desk, browser, form, message):
    escalation = desk.escalate()
    url = f"/escalations/{escalation.pk}/reroute/"
    response = browser.post(url, form, HTTP_HX_REQUEST="true")
    assert response.status_code == 422
    assert response.content.decode().lstrip().startswith('<article id="packet"')
    assert message in response.content.decode()
    assert "<details open>" in response.content.decode()
    page = refused_without_htmx(browser, escalation, url, form, anchor="reroute-form")
    assert message in page and "<details open>" in page and form["note"] in page
    assert Task.objects.get(key="plan").state == "escalated"


def test_a_reviewer_returns_the_packet_naming_the_field(desk, browser):
    escalation = desk.escalate()
    response = committed(
        browser.post,
        f"/escalations/{escalation.pk}/return/",
        {"field": "evidence", "note": "the query's rows are missing: send its result"},
    )
    assert response.status_code == 302
    escalation.refresh_from_db()
    assert escalation.status == "returned"
    assert escalation.returned_reason == "evidence: the query's rows are missing: send its result"
    returned = Delivery.objects.get(type="packet.returned")
    assert returned.payload["data"]["field"] == "evidence"
    assert returned.payload["data"]["by"] == "reviewer:alice"
    assert Task.objects.get(key="plan").state == "escalated"  # it waits for a better packet


def test_a_better_packet_after_a_return_reopens_the_escalation(desk, browser):
    escalation = desk.escalate()
    browser.post(f"/escalations/{escalation.pk}/return/", {"field": "tried", "note": "say what"})
    again = desk.planner.post(
        "packet.submitted",
        {
            "run": "tier-discounts",
            "task": "plan",
            "agent": "planner",
            "packet": {
                "task": "plan",
                "tried": ["Asked pricing for the tier rule"],
                "ruled_out": [],
                "evidence": [{"kind": "query_result", "source": "SELECT 1", "payload_hash": HASH}],
                "smallest_unblocking_question": "Is loyalty_points the tier source?",
            },
        },
    )
    assert again.json()["escalation"] == escalation.pk  # one waiting escalation per task
    assert Escalation.objects.get(pk=escalation.pk).status == "open"


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"field": "transcript", "note": "x"}, "Name the packet field"),
        ({"field": "evidence", "note": ""}, "Say what is missing from evidence"),
        (
            {"field": "evidence", "note": "z" * 1001},
            "The note is 1,001 characters; it may have at most",
        ),
    ],
)
def test_a_bad_return_is_refused_saying_why(desk, browser, form, message):
    escalation = desk.escalate()
    url = f"/escalations/{escalation.pk}/return/"
    response = browser.post(url, form, HTTP_HX_REQUEST="true")
    assert response.status_code == 422 and message in response.content.decode()
    page = refused_without_htmx(browser, escalation, url, form, anchor="return-form")
    assert message in page
    escalation.refresh_from_db()
    assert escalation.status == "open"


def test_aborting_cancels_the_task_and_its_dependants_and_fails_the_run(desk, browser):
    escalation = desk.escalate()
    response = committed(
        browser.post,
        f"/escalations/{escalation.pk}/abort/",
        {"reason": "the discount was dropped from the release"},
    )
    assert response.status_code == 302
    states = dict(Task.objects.values_list("key", "state"))
    assert states == {
        "plan": "cancelled",
        "discount-resolver": "cancelled",
        "api-change": "cancelled",
    }
    run = Run.objects.get(key="tier-discounts")
    assert run.state == "failed"
    assert run.cause == "plan: aborted by reviewer:alice: the discount was dropped from the release"
    failed = Delivery.objects.get(type="run.failed")
    assert failed.payload["data"]["cause"] == run.cause
    decision = Decision.objects.get(action="abort")
    assert "2 tasks waiting on it cancelled (api-change, discount-resolver)" in decision.reason
    page = browser.get(f"/runs/{run.pk}/").content.decode()
    assert "Failure cause" in page and "the discount was dropped" in page


def test_the_abort_form_says_what_else_the_abort_does(desk, browser):
    escalation = desk.escalate()
    page = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    assert (
        "This fails run tier-discounts: no other escalation in it is waiting and 3 tasks "
        "cancelled (plan, api-change, discount-resolver)." in page
    )
    desk.run("two", tasks=[{"key": "plan", "agent": "planner"}, {"key": "docs", "agent": "coder"},
                           {"key": "notes", "agent": "coder"}])  # fmt: skip
    first = desk.escalate(run="two")
    desk.escalate("docs", run="two")
    desk.escalate("notes", run="two")
    page = browser.get(f"/escalations/{first.pk}/").content.decode()
    assert (
        "This fails run two: 2 other escalations waiting in it will be closed (docs, notes) "
        "and 1 task cancelled (plan)." in page
    )


def test_the_abort_form_names_the_runs_other_unfinished_work(desk, browser):
    """A task that neither waits on the aborted one nor on an escalation stops with the run: the
    warning said nothing of it, and it sat pending with run:failed afterwards."""
    desk.run("two", tasks=[{"key": "plan", "agent": "planner"}, {"key": "docs", "agent": "coder"},
                           {"key": "notes", "agent": "coder"}])  # fmt: skip
    first = desk.escalate(run="two")
    page = browser.get(f"/escalations/{first.pk}/").content.decode()
    assert (
        "This fails run two: no other escalation in it is waiting and 1 task cancelled (plan); "
        "its 2 other unfinished tasks (docs, notes) will not go on." in page
    )


def test_an_abort_reason_ending_in_a_full_stop_reads_once_punctuated(desk, browser):
    escalation = desk.escalate()
    response = committed(
        browser.post,
        f"/escalations/{escalation.pk}/abort/",
        {"reason": "Deleting the bucket is out of scope; stop this run."},
        HTTP_HX_REQUEST="true",
    )
    page = response.content.decode()
    assert "out of scope; stop this run; the run failed</h2>" in page
    assert ".;" not in page


def test_an_attempt_that_escalated_still_stopped_with_its_packet_once_answered(desk, browser):
    escalation = desk.escalate()
    committed(browser.post, f"/escalations/{escalation.pk}/answer/", {"text": "Use the points"})
    page = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    recorded = page[page.index("Attempts Bulkhead recorded") :]
    assert "stopped with a packet" in recorded
    assert "ended, not reported" not in recorded


def test_an_abort_says_who_aborted_why_and_what_was_cancelled(desk, browser):
    desk.run("two", tasks=[{"key": "plan", "agent": "planner"},
                           {"key": "after", "agent": "coder", "prerequisites": ["plan"]},
                           {"key": "docs", "agent": "coder"}])  # fmt: skip
    escalation = desk.escalate(run="two")
    other = desk.escalate("docs", run="two")
    response = committed(
        browser.post,
        f"/escalations/{escalation.pk}/abort/",
        {"reason": "the discount was dropped"},
        HTTP_HX_REQUEST="true",
    )
    page = response.content.decode()
    outcome = page[page.index('class="outcome"') : page.index('id="status"')]
    assert "Aborted by alice: the discount was dropped; the run failed</h2>" in outcome
    assert "<p>Cancelled: plan, after</p>" in outcome
    assert f"<p>Closed with it: escalation {other.pk} (docs)</p>" in outcome
    assert "Closed by" not in page

    # The run's other escalation says why it was closed, to a reviewer and in its history.
    theirs = browser.get(f"/escalations/{other.pk}/").content.decode()
    assert "Closed: run two failed when alice aborted plan</h2>" in theirs
    assert "Closed by" not in theirs
    assert (
        f"escalation {other.pk} closed by alice</strong> — Closed: run two failed when alice "
        "aborted plan" in section(theirs, "history")
    )
    other.refresh_from_db()
    assert (other.status, other.claimed_by.username) == ("closed", "alice")
    claiming = browser.post(
        f"/escalations/{other.pk}/claim/", {"from": "packet"}, HTTP_HX_REQUEST="true"
    )
    assert claiming.status_code == 409
    assert "Closed: run two failed when alice aborted plan" in claiming.content.decode()


def test_an_abort_without_a_reason_is_refused(desk, browser):
    escalation = desk.escalate()
    url = f"/escalations/{escalation.pk}/abort/"
    response = browser.post(url, {"reason": ""}, HTTP_HX_REQUEST="true")
    assert response.status_code == 422
    assert "Say why the task is aborted" in response.content.decode()
    page = refused_without_htmx(browser, escalation, url, {"reason": ""}, anchor="abort-form")
    assert "Say why the task is aborted" in page
    assert Run.objects.get(key="tier-discounts").state == "running"


def refused_without_htmx(browser, escalation, url, form, *, anchor):
    """A plain form post that is refused ends on the packet page, which says why once."""
    response = browser.post(url, form)
    packet = f"/escalations/{escalation.pk}/"
    assert response.status_code == 302 and response["Location"] == f"{packet}#{anchor}"
    page = browser.get(packet)
    assert page.status_code == 200
    again = browser.get(packet).content.decode()
    assert 'class="error" role="alert"' not in again  # shown once: a reload is a fresh page
    return page.content.decode()


# After an action the page shows the new state everywhere; without htmx every action ends on it


def section(page, heading_id, next_id=None):
    start = page.index(f'id="{heading_id}"')
    return page[start : page.index(f'id="{next_id}"', start)] if next_id else page[start:]


def test_answering_swaps_the_whole_packet_to_its_new_state(desk, browser):
    escalation = desk.escalate()
    browser.post(f"/escalations/{escalation.pk}/claim/", {"from": "packet"})
    before = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    assert "You have claimed it until" in before and "This answer will release" in before
    response = committed(
        browser.post,
        f"/escalations/{escalation.pk}/answer/",
        {"text": "use loyalty points"},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert page.lstrip().startswith('<article id="packet"')
    assert "Answered by alice — released 1 task</h2>" in page
    assert '<ul class="released"><li>plan</li></ul>' in page
    assert "You have claimed it until" not in page and "Answered by alice at" in page
    assert '<h2 id="release">Released</h2>' in page
    assert f"escalation {escalation.pk} answered by alice" in section(page, "history")
    assert "use loyalty points" in section(page, "history")
    for gone in ("Answer and release", "Reroute to another agent", "Return the packet", "Abort"):
        assert gone not in page, gone


@pytest.mark.parametrize(
    ("action", "form"),
    [
        ("reroute", {"agent": "coder", "note": "the coder can read the schema"}),
        ("return", {"field": "evidence", "note": "send the query's rows"}),
        ("abort", {"reason": "the discount was dropped"}),
    ],
)
def test_every_other_action_swaps_the_whole_packet_too(desk, browser, action, form):
    escalation = desk.escalate()
    response = committed(
        browser.post, f"/escalations/{escalation.pk}/{action}/", form, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert page.lstrip().startswith('<article id="packet"')
    assert "Nobody has claimed it" not in page and 'hx-trigger="every' not in page
    assert "Other actions" not in page and "Answer and release" not in page
    assert f"escalation {escalation.pk} " in section(page, "history")


@pytest.mark.parametrize(
    ("action", "form"),
    [
        ("answer", {"text": "use loyalty points"}),
        ("reroute", {"agent": "coder", "note": "the coder can read the schema"}),
        ("return", {"field": "evidence", "note": "send the query's rows"}),
        ("abort", {"reason": "the discount was dropped"}),
    ],
)
def test_without_htmx_every_action_redirects_to_the_packet(desk, browser, action, form):
    escalation = desk.escalate()
    response = committed(browser.post, f"/escalations/{escalation.pk}/{action}/", form)
    assert response.status_code == 302
    assert response["Location"] == f"/escalations/{escalation.pk}/"
    page = browser.get(response["Location"]).content.decode()
    assert "Other actions" not in page and "Answer and release" not in page


def test_visiting_an_actions_address_opens_the_packet(desk, browser):
    escalation = desk.escalate()
    for action in ("answer", "reroute", "return", "abort"):
        response = browser.get(f"/escalations/{escalation.pk}/{action}/")
        assert response.status_code == 302, action
        assert response["Location"] == f"/escalations/{escalation.pk}/"
    escalation.refresh_from_db()
    assert escalation.status == "open"


def test_without_htmx_a_refused_answer_keeps_the_draft_on_the_packet(desk, browser):
    escalation = desk.escalate()
    page = refused_without_htmx(
        browser,
        escalation,
        f"/escalations/{escalation.pk}/answer/",
        {"text": "x" * 5001},
        anchor="answer-form",
    )
    form = section(page, "answer-form", "status")
    assert "it may have at most 5,000" in form and "x" * 5001 in form


def test_without_htmx_a_second_answer_is_told_who_answered(desk, browser, fleet):
    escalation = desk.escalate()
    bob = Client()
    bob.force_login(member("bob", fleet))
    committed(bob.post, f"/escalations/{escalation.pk}/answer/", {"text": "loyalty points"})
    page = refused_without_htmx(
        browser,
        escalation,
        f"/escalations/{escalation.pk}/answer/",
        {"text": "add a column"},
        anchor="answer-form",
    )
    assert "Answered by bob at" in page
    assert "Your answer was not recorded" in page and "add a column" in page


def test_without_htmx_a_refused_claim_is_shown_on_the_packet(desk, browser, fleet):
    escalation = desk.escalate()
    bob = Client()
    bob.force_login(member("bob", fleet))
    bob.post(f"/escalations/{escalation.pk}/claim/", {"from": "packet"})
    page = refused_without_htmx(
        browser,
        escalation,
        f"/escalations/{escalation.pk}/claim/",
        {"from": "packet"},
        anchor="status",
    )
    assert "Claimed by bob until" in section(page, "status", "tried")


def test_an_abort_closes_an_escalation_of_the_run_returned_for_a_better_packet(desk, browser):
    desk.run("two", tasks=[{"key": "plan", "agent": "planner"}, {"key": "docs", "agent": "coder"}])
    escalation = desk.escalate(run="two")
    returned = desk.escalate("docs", run="two")
    committed(
        browser.post, f"/escalations/{returned.pk}/return/",
        {"field": "evidence", "note": "cite the query you ran"},
    )  # fmt: skip
    assert Escalation.objects.get(pk=returned.pk).status == "returned"
    page = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    assert "This fails run two: 1 other escalation waiting in it will be closed (docs)" in page
    committed(
        browser.post, f"/escalations/{escalation.pk}/abort/", {"reason": "dropped"},
        HTTP_HX_REQUEST="true",
    )  # fmt: skip
    returned.refresh_from_db()
    assert (returned.status, returned.outcome) == ("closed", "run_failed")


def test_the_attempt_that_sent_the_packet_is_shown_stopped_not_running(desk, browser):
    escalation = desk.escalate()
    page = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    recorded = page[page.index('id="recorded"') :]
    assert '<span class="badge badge-stopped">stopped with a packet</span>' in recorded
    assert "badge-running" not in recorded


def test_an_abort_reason_too_long_is_refused_not_cut(desk, browser):
    escalation = desk.escalate()
    url = f"/escalations/{escalation.pk}/abort/"
    response = browser.post(url, {"reason": "r" * 1001}, HTTP_HX_REQUEST="true")
    assert response.status_code == 422
    assert "The reason is 1,001 characters; it may have at most 1,000" in response.content.decode()
    assert "r" * 1001 in response.content.decode()  # what was typed is still there
    escalation.refresh_from_db()
    assert escalation.status == "open"
    assert Run.objects.get(key="tier-discounts").state == "running"


def aborted_with_others(desk, alice, run: str, others: int) -> int:
    """The statements of an abort in a run where `others` more escalations wait."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from escalations.services import escalation_abort

    tasks = [{"key": f"t{i}", "agent": "planner"} for i in range(others + 1)]
    desk.run(run, tasks=tasks)
    escalations = [desk.escalate(f"t{i}", run=run) for i in range(others + 1)]
    with (
        TestCase.captureOnCommitCallbacks(execute=False),
        CaptureQueriesContext(connection) as queries,
    ):
        escalation_abort(escalation=escalations[0], reviewer=alice, reason="dropped")
    closed = Escalation.objects.filter(run__key=run, status="closed").count()
    assert closed == others + 1  # the run failed: the others closed too, saying why
    return len(queries.captured_queries)


def test_aborting_costs_the_same_statements_however_many_escalations_the_run_closes(desk, alice):
    assert aborted_with_others(desk, alice, "two", 2) == aborted_with_others(desk, alice, "six", 6)
