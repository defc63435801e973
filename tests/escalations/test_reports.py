"""Manager reports: blast radius per run and per handoff, escalation health, CSV; pure parts first."""

import csv
import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.test import TestCase
from django.utils import timezone

from escalations import reports
from escalations.models import Escalation
from fleet import services
from runs.models import Attempt, Claim, Run, Task
from tests.conftest import signed_in
from tests.escalations.desk import QUESTION, Desk, member
from tests.fixtures.seed import ALL_GREEN_RUN, late_artifacts_run, phoenixdx

T0 = datetime(2026, 6, 2, 9, 0, tzinfo=UTC)


# Pure


def test_percentiles_interpolate_between_ranks():
    assert reports.percentile([], 0.5) is None
    assert reports.percentile([4.0], 0.9) == 4.0
    assert reports.percentile([1.0, 2.0, 3.0, 10.0], 0.5) == 2.5
    assert reports.percentile([1.0, 2.0, 3.0, 10.0], 0.9) == pytest.approx(7.9)
    assert reports.stats([None, 1.0, 3.0]) == reports.Stats(count=2, median=2.0, p90=2.8)


def test_minutes_between_needs_both_ends():
    assert reports.minutes_between(T0, T0 + timedelta(seconds=90)) == 1.5
    assert reports.minutes_between(T0, None) is None


def attempt(number, kind="", prompt="p1", context="c1", task="r/plan"):
    return reports.AttemptFact(task, number, prompt, context, kind)


def test_a_non_transient_failure_run_again_unchanged_is_a_same_context_retry():
    repeated = [attempt(1, "reasoning"), attempt(2, "reasoning"), attempt(3, context="c2")]
    assert reports.same_context_retries(repeated) == [(repeated[0], repeated[1])]


def test_transient_retries_and_changed_attempts_are_not_counted():
    assert reports.same_context_retries([attempt(1, "transient"), attempt(2)]) == []
    assert reports.same_context_retries([attempt(1, "spec"), attempt(2, context="c2")]) == []
    assert reports.same_context_retries([attempt(1, "spec"), attempt(1, task="r/other")]) == []


def test_a_refutation_after_artifacts_is_a_late_disaster():
    assert reports.is_late_disaster(T0 + timedelta(minutes=41), [T0 + timedelta(minutes=18)])
    assert not reports.is_late_disaster(T0 + timedelta(minutes=2), [T0 + timedelta(minutes=18)])
    assert not reports.is_late_disaster(None, [T0])


def test_a_runs_blast_radius_is_its_widest_reaching_claims():
    radii = {
        "a": {"agents": 3, "artifacts": 4, "minutes": 40.04, "tasks": ["x", "y"]},
        # Never checked: it counts to now, but it reached fewer agents.
        "b": {"agents": 2, "artifacts": 4, "minutes": 264000.0, "tasks": ["y", "z"]},
    }
    summary = reports.run_summary(radii, {"a": "refuted", "b": "unverified", "c": "verified"})
    assert summary == {
        "claims": 3,
        "unverified": 1,
        "refuted": 1,
        "claim": "a",
        "agents": 3,
        "artifacts": 4,
        "minutes": 40.0,
        "tasks": 2,  # the widest claim's, like its agents and artifacts: not b's task z
    }
    assert reports.run_summary({}, {})["agents"] == 0
    assert reports.run_summary({}, {})["tasks"] == 0


@pytest.mark.parametrize(
    "text", ['=HYPERLINK("https://evil.example";"x")', "+chk", "-2+3", "@plan", "\tx", "\rx"]
)
def test_a_csv_cell_a_spreadsheet_would_run_as_a_formula_is_kept_as_text(text):
    from escalations.views.reports import CsvWriter

    assert CsvWriter.cell(text) == "'" + text


def test_other_csv_cells_are_left_as_they_are():
    from escalations.views.reports import CsvWriter

    assert [CsvWriter.cell(v) for v in ("plan.x", "a=b", 3, 2.25, None, True)] == [
        "plan.x",
        "a=b",
        3,
        "2.2",
        "",
        "yes",
    ]


# Pages


@pytest.fixture
def all_green(client, fleet):
    phoenixdx(client, fleet)
    call_command("import_events", "acme", str(ALL_GREEN_RUN), stdout=io.StringIO())


def rows_of(response):
    return list(csv.DictReader(io.StringIO(response.content.decode())))


@pytest.mark.django_db
def test_the_all_green_run_reports_3_agents_4_prs_40_minutes_and_a_late_disaster(all_green, carol):
    page = signed_in(carol).get("/reports/?days=all")
    assert page.status_code == 200
    runs = rows_of(signed_in(carol).get("/reports/runs.csv?days=all"))
    assert len(runs) == 1
    run = runs[0]
    assert (run["run"], run["agents"], run["artifacts"], run["minutes"]) == (
        "tier-discounts",
        "3",
        "4",
        "40.0",
    )
    assert run["late_disasters"] == "plan.customer-tier"
    assert (
        run["tasks_reached"] == "4"
    )  # plan.customer-tier's: api-change, api-tests, confirm-schema, ...
    html = page.content.decode()
    assert "Blast radius per run" in html and '<canvas id="blast-chart"' in html
    assert '"minutes": [40.0]' in html  # the chart's data
    assert (
        "a claim never checked counts to now while its run goes on, and to the run's end "
        "once it is over" in html
    )


@pytest.mark.django_db
def test_work_reported_after_the_check_is_not_in_the_blast_radius(client, fleet, carol, tmp_path):
    phoenixdx(client, fleet)
    late = late_artifacts_run(tmp_path / "late.jsonl")
    call_command("import_events", "acme", str(late), stdout=io.StringIO())

    [run] = rows_of(signed_in(carol).get("/reports/runs.csv?days=all"))
    assert (run["widest_claim"], run["agents"], run["artifacts"], run["minutes"]) == (
        "c1",
        "3",
        "1",
        "7.0",
    )
    assert run["late_disasters"] == "c1"
    html = signed_in(carol).get("/reports/?days=all").content.decode()
    assert "with 1 artifact built on it before it was refuted" in html
    page = signed_in(carol).get(f"/runs/{Run.objects.get(key='late-artifacts').pk}/")
    assert "3 agents, 1 artifact, 7.0 min" in page.content.decode()
    # Each artifact is listed, so the figure can be checked: b's PR before the check, e's after.
    listed = page.content.decode().split('id="artifacts-title"')[1].split("</section>")[0]
    assert listed.count('<td data-label="Kind" class="key">pull_request</td>') == 4
    assert "acme/shop#1" in listed and "acme/shop#4" in listed
    assert listed.index("acme/shop#1") < listed.index("acme/shop#2")  # in the order reported


@pytest.mark.django_db
def test_a_claim_verified_first_and_refuted_later_counts_from_its_refutation(
    client, fleet, carol, tmp_path
):
    phoenixdx(client, fleet)
    late = late_artifacts_run(tmp_path / "late.jsonl")
    call_command("import_events", "acme", str(late), stdout=io.StringIO())
    # As if a check had verified c1 at 09:03:30, after b and e started on it and before b's PR
    # at 09:04; the refutation at 09:08 is when it was found wrong.
    claim = Claim.objects.get(key="c1")
    refuted_at = claim.evidence.get(verdict="refuted").created_at
    Claim.objects.filter(pk=claim.pk).update(checked_at=refuted_at - timedelta(seconds=270))

    [run] = rows_of(signed_in(carol).get("/reports/runs.csv?days=all"))
    assert run["late_disasters"] == "c1"
    html = signed_in(carol).get("/reports/?days=all").content.decode()
    assert "with 1 artifact built on it before it was refuted" in html


@pytest.mark.django_db
def test_the_csv_files_keep_agents_keys_from_running_as_formulas(client, fleet, carol, tmp_path):
    phoenixdx(client, fleet)
    run, plan, check, claim = '=HYPERLINK("https:evil.example";"x")', "@plan", "+chk", "-2+3"
    tasks = [
        {"key": plan, "agent": "planner"},
        {"key": check, "agent": "schema", "prerequisites": [plan], "checks": [claim]},
    ]
    same = {"prompt_hash": "=p", "context_hash": "=c"}
    failure = {"kind": "reasoning", "signature": "sig", "message": "m"}
    events = [
        ("planner", "run.started", {"title": "inj", "tasks": tasks}),
        ("planner", "task.started", {"task": plan, "attempt": same}),
        ("planner", "claim.posted", {"task": plan, "claim": {"key": claim, "statement": "`x`"}}),
        ("planner", "task.finished", {"task": plan, "outcome": "succeeded"}),
        ("schema", "task.started", {"task": check, "attempt": same}),
        ("schema", "task.finished", {"task": check, "outcome": "failed", "failure": failure}),
    ]
    path = tmp_path / "inj.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {"agent": a, "type": t, "timestamp": T0.isoformat(), "data": {"run": run, **d}}
            )
            + "\n"
            for a, t, d in events
        )
    )
    call_command("import_events", "acme", str(path), stdout=io.StringIO())
    failed = Attempt.objects.get(task__key=check)
    failed.pk, failed.number, failed.failure_kind = None, 2, ""  # run again, unchanged
    failed.save()

    [row] = rows_of(signed_in(carol).get("/reports/runs.csv?days=all"))
    assert (row["run"], row["widest_claim"]) == ("'" + run, "'" + claim)
    [retry] = rows_of(signed_in(carol).get("/reports/retries.csv?days=all"))
    assert retry["task"] == f"'{run}/{check}"
    assert (retry["prompt_hash"], retry["context_hash"]) == ("'=p", "'=c")


@pytest.mark.django_db
def test_handoffs_say_which_boundaries_carry_checkable_evidence(all_green, carol):
    handoffs = rows_of(signed_in(carol).get("/reports/handoffs.csv?days=all"))
    boundary = next(h for h in handoffs if (h["producer"], h["consumer"]) == ("planner", "schema"))
    assert boundary["claims"] == "1" and boundary["checkable"] == "0"
    html = signed_in(carol).get("/reports/?days=all").content.decode()
    assert "planner → schema" in html and "0 of 1" in html


@pytest.mark.django_db
def test_escalation_health_is_measured_and_escalated_is_kept_apart_from_failed(
    client, fleet, carol
):
    desk = Desk(client, fleet)
    desk.run()
    escalation = desk.escalate()
    opened = timezone.now() - timedelta(minutes=10)
    Escalation.objects.filter(pk=escalation.pk).update(opened_at=opened)
    alice = signed_in(member("alice", fleet))
    alice.get(f"/escalations/{escalation.pk}/")  # the first look and the packet opened
    Escalation.objects.filter(pk=escalation.pk).update(
        first_looked_at=opened + timedelta(minutes=4),
        packet_opened_at=opened + timedelta(minutes=4),
    )
    with TestCase.captureOnCommitCallbacks(execute=True):
        alice.post(f"/escalations/{escalation.pk}/answer/", {"text": "loyalty points"})
    rows = rows_of(signed_in(carol).get("/reports/escalations.csv"))
    assert len(rows) == 1
    row = rows[0]
    assert row["status"] == "answered" and row["early"] == "yes"
    assert row["first_look_minutes"] == "4.0"  # minutes to one decimal, as the page shows them
    assert float(row["answer_minutes"]) == pytest.approx(10.0, abs=0.2)
    assert float(row["packet_to_action_minutes"]) == pytest.approx(6.0, abs=0.2)
    html = signed_in(carol).get("/reports/").content.decode()
    assert "Early escalations<strong>1</strong>" in html
    assert "Escalated<strong>1</strong>" in html and "Failed<strong>0</strong>" in html
    # The answer is a claim of the run (its page lists it), not one of the agents' claims the
    # blast radius counts: the column says whose claims it counts.
    assert Claim.objects.filter(run=escalation.run, posted_by="reviewer:alice").count() == 1
    assert '<td data-label="Agents\' claims">0</td>' in html
    assert "A reviewer's answer is a claim too" in html


@pytest.mark.django_db
def test_same_context_retries_are_listed(client, fleet, carol):
    desk = Desk(client, fleet)
    desk.run()
    task = Task.objects.get(key="plan")
    for number, kind in ((1, "reasoning"), (2, "")):
        Attempt.objects.create(
            task=task,
            number=number,
            agent=desk.planner.agent,
            prompt_hash="p",
            context_hash="c",
            started_at=timezone.now(),
            failure_kind=kind,
        )
    rows = rows_of(signed_in(carol).get("/reports/retries.csv"))
    assert rows == [
        {
            "task": "tier-discounts/plan",
            "failed_attempt": "1",
            "failure": "reasoning",
            "repeat": "2",
            "prompt_hash": "p",
            "context_hash": "c",
        }
    ]
    assert (
        "Same-context retries<strong>1</strong>"
        in signed_in(carol).get("/reports/").content.decode()
    )


@pytest.mark.django_db
def test_a_reviewer_is_told_reports_are_for_managers(fleet):
    alice = signed_in(member("alice", fleet))
    response = alice.get("/reports/")
    assert response.status_code == 403
    assert "Reports are for managers" in response.content.decode()
    assert alice.get("/reports/runs.csv").status_code == 403
    assert 'href="/reports/"' not in alice.get("/escalations/").content.decode()


@pytest.mark.django_db
def test_a_manager_sees_only_the_fleets_they_manage(all_green, carol):
    other = member("dave", services.fleet_create(name="globex"), role="manager")
    assert rows_of(signed_in(other).get("/reports/runs.csv?days=all")) == []
    assert rows_of(signed_in(carol).get("/reports/runs.csv?days=all&fleet=globex")) != []


@pytest.mark.django_db
def test_an_unknown_table_is_not_found(carol):
    assert signed_in(carol).get("/reports/secrets.csv").status_code == 404


@pytest.mark.django_db
def test_the_window_leaves_out_older_runs(all_green, carol):
    assert rows_of(signed_in(carol).get("/reports/runs.csv?days=7")) == []
    assert len(rows_of(signed_in(carol).get("/reports/runs.csv?days=all"))) == 1


@pytest.mark.django_db
def test_the_window_leaves_out_older_runs_handoffs_too(all_green, carol):
    assert rows_of(signed_in(carol).get("/reports/handoffs.csv?days=all")) != []
    assert rows_of(signed_in(carol).get("/reports/handoffs.csv?days=7")) == []


@pytest.mark.django_db
def test_without_a_window_the_reports_cover_all_of_history(all_green, carol):
    assert len(rows_of(signed_in(carol).get("/reports/runs.csv"))) == 1
    assert "tier-discounts" in signed_in(carol).get("/reports/").content.decode()


def test_timeliness_per_fleet_and_per_reviewer(desk, alice, client):
    """Reminders sent, past tier 1, overdue now, and first look and answer times, from the data."""
    from datetime import timedelta

    from escalations.services import escalation_answer, routing
    from fleet.stories import story_clock
    from tests.conftest import committed
    from tests.escalations.desk import member
    from tests.escalations.routed import due, pool, route

    member("manny", desk.fleet, role="manager")
    alice.email = "alice@example.com"  # reached: her reminder counts
    alice.save()
    pool(desk.fleet, "planners", "alice")
    route(desk.fleet, "planners")
    due(desk.fleet, 60)
    answered = desk.escalate()
    desk.run("two")
    waiting = desk.escalate(run="two")
    opened = waiting.opened_at
    with story_clock(answered.opened_at + timedelta(minutes=12)):
        committed(
            escalation_answer,
            escalation=answered,
            reviewer=alice,
            text="Use the loyalty_points threshold",
        )
    routing.sweep(opened + timedelta(minutes=40))
    routing.sweep(opened + timedelta(minutes=70))
    client.login(username="manny", password="correct horse battery staple")
    with story_clock(opened + timedelta(minutes=70)):
        page = client.get("/reports/")
    rows = {r["name"]: r for r in page.context["timeliness"]["fleets"]}
    acme = rows["acme"]
    assert (acme["escalations"], acme["reminders"], acme["past_tier_1"], acme["overdue_now"]) == (
        2,
        1,
        1,
        1,
    )
    assert acme["answer"].count == 1 and acme["answer"].median == 12.0
    assert (acme["answers"], acme["released_many"]) == (1, 0)  # the answer released plan alone
    reviewers = {r["name"]: r for r in page.context["timeliness"]["reviewers"]}
    # The one past tier 1 is the managers' and nobody's yet: its own row, so the rows add up.
    assert {name: r["escalations"] for name, r in reviewers.items()} == {"alice": 1, "": 1}
    html = page.content.decode()
    assert "<em>no reviewer</em> <small>(unassigned, unanswered)</small>" in html
    assert "Reaching reviewers in time" in html and "Answers releasing more than one task" in html
    # An answer that released two waiting tasks (one question asked twice) counts as such.
    answered.answer.released = ["plan", "plan-again"]
    answered.answer.save()
    with story_clock(opened + timedelta(minutes=70)):
        again = client.get("/reports/").context["timeliness"]["fleets"][0]
    assert (again["answers"], again["released_many"]) == (1, 1)


def test_escalated_counts_the_tasks_that_joined_an_escalation_too(client, fleet, carol):
    desk = Desk(client, fleet)
    desk.run("one", [{"key": "step", "agent": "planner"}])
    desk.run("two", [{"key": "step", "agent": "coder"}])
    shared = desk.escalate(run="one", task="step", smallest_unblocking_question=QUESTION)
    joined = desk.escalate(run="two", task="step", smallest_unblocking_question=QUESTION)
    assert joined.pk == shared.pk  # the same question: one escalation, two tasks waiting
    html = signed_in(carol).get("/reports/").content.decode()
    assert "Escalated<strong>2</strong>" in html


@pytest.mark.django_db
def test_a_reviewers_answer_is_not_counted_as_an_agents_claim_or_handoff(desk, alice, carol):
    """The answer is stored as a verified claim on the task it answered, which the coders then
    consume: it is the reviewer's, so the run's claims, its widest claim and the handoff
    boundaries leave it out, and the run page says who posted it."""
    from escalations.services import escalation_answer
    from runs.models import Claim
    from tests.conftest import committed

    escalation = desk.escalate()
    committed(
        escalation_answer, escalation=escalation, reviewer=alice, text="Use the loyalty_points"
    )
    answer = Claim.objects.get(run__key="tier-discounts")
    assert answer.posted_by == "reviewer:alice"

    [run] = rows_of(signed_in(carol).get("/reports/runs.csv?days=all"))
    assert (run["claims"], run["widest_claim"]) == ("0", ""), run
    assert rows_of(signed_in(carol).get("/reports/handoffs.csv?days=all")) == []
    page = signed_in(carol).get(f"/runs/{answer.run_id}/").content.decode()
    assert "reviewer:alice<br><small>answering plan</small>" in page


@pytest.mark.django_db
def test_the_escalations_csv_says_how_a_closed_escalation_closed(client, fleet, carol):
    desk = Desk(client, fleet)
    desk.run()
    escalation = desk.escalate()
    alice = signed_in(member("alice", fleet))
    with TestCase.captureOnCommitCallbacks(execute=True):
        alice.post(f"/escalations/{escalation.pk}/abort/", {"reason": "out of scope"})

    [row] = rows_of(signed_in(carol).get("/reports/escalations.csv"))
    assert (row["status"], row["outcome"]) == ("closed", "aborted")


@pytest.mark.postgres
@pytest.mark.django_db
def test_escalation_health_counts_its_fleets_tasks_not_the_databases(client, fleet, carol):
    """Another fleet's run of 3,000 tasks is not read to count this fleet's failed tasks."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from escalations.selectors.reports import escalation_health
    from runs.models import Run
    from tests.plans import rows_read

    desk = Desk(client, fleet)
    desk.run()
    Task.objects.filter(key="plan").update(state=Task.State.FAILED)
    other = services.fleet_create(name="globex")
    agent, _, _ = services.agent_create(fleet=other, name="coder", role="coding")
    big = Run.objects.create(fleet=other, key="big", started_by=agent, started_at=timezone.now())
    Task.objects.bulk_create(
        Task(run=big, key=f"t{n}", agent=agent, position=n, created_at=timezone.now(),
             state=Task.State.FAILED)
        for n in range(3_000)
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_task, runs_run")

    with CaptureQueriesContext(connection) as queries:
        health = escalation_health([fleet.pk], since=None, runs=[])

    assert health["failed_tasks"] == 1
    [counted] = [
        q["sql"] for q in queries.captured_queries if 'COUNT("runs_task"."id")' in q["sql"]
    ]
    assert rows_read(counted) <= 10, counted


def reported_runs(desk: Desk, fleet, prefix: str, count: int) -> int:
    """The statements of the report's runs table when the fleet has `count` runs with claims."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from escalations.selectors.reports import report_runs
    from runs.models import Claim

    for i in range(count):
        desk.run(f"{prefix}{i}")
        task = Task.objects.get(run__key=f"{prefix}{i}", key="plan")
        Claim.objects.create(run=task.run, task=task, key="plan.tier", statement="s",
                             posted_at=timezone.now(), posted_by="agent:planner")  # fmt: skip
    with CaptureQueriesContext(connection) as queries:
        rows = report_runs([fleet.pk], since=None, now=timezone.now())
    assert len([r for r in rows if r["run"].key.startswith(prefix)]) == count
    return len(queries.captured_queries)


@pytest.mark.django_db
def test_the_runs_table_costs_the_same_statements_however_many_runs(client, fleet):
    desk = Desk(client, fleet)
    assert reported_runs(desk, fleet, "a", 2) == reported_runs(desk, fleet, "b", 6)


def test_a_reminder_that_reached_nobody_is_not_counted_and_says_why(desk, client):
    """Bob has no channel and no email address: his reminder is made once, and says so."""
    from datetime import timedelta

    from escalations.services import routing
    from fleet.stories import story_clock
    from tests.escalations.desk import member
    from tests.escalations.routed import due, pool, route

    member("bob", desk.fleet)
    member("manny", desk.fleet, role="manager")
    pool(desk.fleet, "planners", "bob")
    route(desk.fleet, "planners")
    due(desk.fleet, 60)
    escalation = desk.escalate()

    assert routing.sweep(escalation.opened_at + timedelta(minutes=40))["reminder"] == 1

    [step] = escalation.steps.all()
    assert (step.reached, step.note) == (0, "reached nobody: no channel and no email address: bob")
    client.login(username="manny", password="correct horse battery staple")
    packet = client.get(f"/escalations/{escalation.pk}/").content.decode()
    assert "reached nobody: no channel and no email address: bob" in packet
    with story_clock(escalation.opened_at + timedelta(minutes=40)):
        page = client.get("/reports/")
    [acme] = page.context["timeliness"]["fleets"]
    assert acme["reminders"] == 0
