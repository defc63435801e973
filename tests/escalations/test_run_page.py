"""The run page: the graph's data (states and blockers), claims with blast radius, decisions with
reasons, progress, the failure cause, deliveries; and the list of runs, per fleet."""

import json
import re

import pytest
from django.test import Client, TestCase

from fleet import services
from fleet.models import Delivery
from runs.models import Run
from tests.conftest import REFUSED_CALLBACK
from tests.escalations.desk import HASH, member

pytestmark = pytest.mark.django_db


@pytest.fixture
def desk_callback_url():
    return REFUSED_CALLBACK


def graph(page):
    data = re.search(r'<script id="graph-data" type="application/json">(.*?)</script>', page, re.S)
    return json.loads(data.group(1))


def test_the_graph_shows_states_and_blockers(desk, browser):
    desk.planner.post(
        "capability.changed", {"capability": "forge", "status": "down", "reason": "503s"}
    )
    escalation = desk.escalate()
    run = Run.objects.get(key="tier-discounts")
    page = browser.get(f"/runs/{run.pk}/").content.decode()
    drawn = graph(page)
    nodes = {n["data"]["id"]: n["data"] for n in drawn["nodes"]}
    assert nodes["plan"]["state"] == "escalated"
    assert nodes["api-change"]["blockers"] == ["capability:forge", "prerequisite:plan"]
    assert nodes["api-change"]["blocked"] is True
    edges = {(e["data"]["source"], e["data"]["target"]) for e in drawn["edges"]}
    assert edges == {("plan", "discount-resolver"), ("plan", "api-change")}
    assert "cytoscape.min.js" in page and "cytoscape-dagre.js" in page and "run-graph.js" in page
    assert '<code class="blocker">capability:forge</code>' in page  # the table says it too
    assert f'href="/escalations/{escalation.pk}/"' in page


def test_claims_decisions_progress_cause_and_deliveries_are_shown(desk, browser):
    desk.planner.post(
        "claim.posted",
        {
            "run": "tier-discounts",
            "task": "plan",
            "claim": {
                "key": "plan.customer-tier",
                "statement": "`customers` has a `customer_tier` column",
                "evidence": {"kind": "query_result", "source": "SELECT 1", "payload_hash": HASH},
            },
        },
    )
    escalation = desk.escalate()
    with TestCase.captureOnCommitCallbacks(execute=True):
        browser.post(f"/escalations/{escalation.pk}/abort/", {"reason": "the feature was dropped"})
    run = Run.objects.get(key="tier-discounts")
    page = browser.get(f"/runs/{run.pk}/").content.decode()
    claims = page[page.index('id="claims-title"') : page.index('id="escalations-title"')]
    assert "plan.customer-tier" in claims and ">unverified<" in claims and "0 agents" in claims
    decisions = page[page.index('id="decisions-title"') : page.index('id="progress-title"')]
    assert ">abort<" in decisions and "alice aborted plan" in decisions
    assert (
        "Failure cause" in page
        and "plan: aborted by reviewer:alice: the feature was dropped" in page
    )
    deliveries = page[page.index('id="deliveries-title"') :]
    for kind in ("run.failed", "escalation.opened"):
        assert f"<code>{kind}</code>" in deliveries
    assert Delivery.objects.filter(type="run.failed").exists()
    assert '<th scope="col">Created</th>' in deliveries and "<small>at <time" not in deliveries
    Delivery.objects.filter(type="run.failed").update(
        status="delivered", delivered_at=run.started_at
    )
    deliveries = browser.get(f"/runs/{run.pk}/").content.decode().split('id="deliveries-title"')[1]
    assert f'at <time datetime="{run.started_at.isoformat()}' in deliveries


def test_a_run_of_another_fleet_is_not_found(desk):
    stranger = Client()
    stranger.force_login(member("mallory", services.fleet_create(name="globex")))
    run = Run.objects.get(key="tier-discounts")
    assert stranger.get(f"/runs/{run.pk}/").status_code == 404
    assert "tier-discounts" not in stranger.get("/runs/").content.decode()


def test_the_runs_list_pages_back_in_time(desk, browser, monkeypatch):
    from escalations.views import runs

    monkeypatch.setattr(runs, "RUNS_PER_PAGE", 1)
    desk.run("second", tasks=[{"key": "x", "agent": "coder"}])
    Run.objects.filter(key="second").update(
        started_at=Run.objects.get(key="tier-discounts").started_at.replace(year=2025)
    )
    first = browser.get("/runs/").content.decode()
    assert "tier-discounts" in first and "second" not in first
    older = re.search(r'href="\?before=([^"]+)" rel="next"', first).group(1)
    second = browser.get(f"/runs/?before={older}").content.decode()
    assert ">second<" in second and "tier-discounts" not in second
    assert browser.get("/runs/?before=nonsense").status_code == 200


def test_the_summary_counts_ready_tasks_apart_from_pending_ones(desk, browser):
    run = Run.objects.get(key="tier-discounts")
    page = browser.get(f"/runs/{run.pk}/").content.decode()
    legend = page[page.index('class="legend"') : page.index("</p>", page.index('class="legend"'))]
    # plan may start now; its two dependants wait on it.
    assert '<span class="badge badge-ready">ready 1</span>' in legend
    assert '<span class="badge badge-pending">pending 2</span>' in legend


def test_decisions_are_named_in_words(desk, browser):
    from django.utils import timezone

    from runs.models import Decision, Task

    run = Run.objects.get(key="tier-discounts")
    task = Task.objects.get(run=run, key="plan")
    for action in ("carry_on", "resume"):
        Decision.objects.create(
            run=run, task=task, action=action, reason=f"{action} reason", created_at=timezone.now()
        )
    page = browser.get(f"/runs/{run.pk}/").content.decode()
    assert '<span class="badge badge-carry_on">carry on</span>' in page
    assert '<span class="badge badge-resume">resume</span>' in page
    assert ">carry_on<" not in page


def test_a_capability_nobody_reported_on_is_shown_as_unknown_beside_its_blocker(desk, browser):
    desk.planner.post(
        "tasks.added",
        {"run": "tier-discounts", "tasks": [
            {"key": "publish", "agent": "coder", "capabilities": ["registry"], "effect": "external"},
        ]},
    )  # fmt: skip
    run = Run.objects.get(key="tier-discounts")
    page = browser.get(f"/runs/{run.pk}/").content.decode()
    row = page[page.index('id="task-publish"') :]
    row = row[: row.index("</tr>")]
    assert (
        '<code class="blocker">capability:registry</code> '
        '<small class="muted">(unknown: nobody has reported on it)</small>'
    ) in row


def run_of(desk, key, size):
    """A run of `size` tasks in a chain over three agents, every third needing the forge."""
    desk.run(key, [
        {"key": f"t{n}", "agent": ("planner", "coder", "coder-b")[n % 3], "title": f"Task {n}",
         "prerequisites": [f"t{n - 1}"] if n else [], "capabilities": ["forge"] if n % 3 == 2 else []}
        for n in range(size)
    ])  # fmt: skip
    return Run.objects.get(key=key)


def test_the_run_page_takes_as_many_statements_for_a_large_run_as_for_a_small_one(desk, browser):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    desk.planner.post("capability.changed", {"capability": "forge", "status": "down"})
    counted = {}
    for key, size in (("small", 4), ("large", 60)):
        run = run_of(desk, key, size)
        desk.escalate("t0", run=key)
        with CaptureQueriesContext(connection) as queries:
            page = browser.get(f"/runs/{run.pk}/")
        assert page.status_code == 200 and f'id="task-t{size - 1}"' in page.content.decode()
        counted[key] = len(queries)
    # Every table of the page is read in a fixed number of statements, not one per row.
    assert counted["large"] == counted["small"] <= 34, counted


@pytest.mark.postgres
def test_the_runs_list_counts_the_runs_it_shows_and_reads_no_other(desk, browser):
    """Tasks and waiting escalations are counted for the 50 runs on the page only: an older run of
    3,000 tasks, on no page yet, is not read to show them."""
    from datetime import timedelta

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from runs.models import Task
    from tests.plans import rows_read

    desk.escalate()
    shown = Run.objects.get(key="tier-discounts")
    agent = Task.objects.filter(run=shown).first().agent
    older = shown.started_at - timedelta(days=1)
    Run.objects.bulk_create(
        Run(fleet=shown.fleet, key=f"r{n}", started_by=agent, started_at=older) for n in range(60)
    )
    big = Run.objects.get(key="r0")
    Run.objects.filter(pk=big.pk).update(started_at=older - timedelta(days=1))
    Task.objects.bulk_create(
        Task(run=big, key=f"t{n}", agent=agent, position=n, created_at=older) for n in range(3_000)
    )

    with CaptureQueriesContext(connection) as queries:
        page = browser.get("/runs/").content.decode()

    row = page[page.index(">tier-discounts<") : page.index("</tr>", page.index(">tier-discounts<"))]
    assert re.findall(r"<td>(\d+)</td>", row)[0] == str(Task.objects.filter(run=shown).count())
    assert f'href="/runs/{shown.pk}/#escalations-title">1</a>' in row  # the escalation waiting
    assert ">r0<" not in page  # the big run is older than the first page
    (listed,) = [q["sql"] for q in queries.captured_queries if "ORDER BY" in q["sql"]
                 and '"runs_run"."started_at" DESC' in q["sql"]]  # fmt: skip
    assert rows_read(listed) <= 200, listed


def test_the_runs_list_counts_only_tasks_a_reviewer_has(desk, browser):
    """A returned packet waits on its agent, not a reviewer; a failed run waits on nobody. The
    task stays escalated in both, and the list counted it as waiting for a reviewer."""

    def waiting_shown(run: str) -> str:
        page = browser.get("/runs/").content.decode()
        start = page.index(f">{run}<")
        row = page[start : page.index("</tr>", start)]
        return re.findall(r"<td>(?:<a [^>]*>)?(\d+|—)(?:</a>)?</td>", row)[1]

    returned = desk.escalate()
    assert waiting_shown("tier-discounts") == "1"
    sent_back = browser.post(
        f"/escalations/{returned.pk}/return/", {"field": "tried", "note": "say which query"}
    )
    assert sent_back.status_code == 302
    assert waiting_shown("tier-discounts") == "—"

    desk.run("aborted", [{"key": "a", "agent": "coder"}, {"key": "b", "agent": "coder"}])
    first = desk.escalate("a", run="aborted", smallest_unblocking_question="Which tier?")
    joined = desk.escalate("b", run="aborted", smallest_unblocking_question="Which tier?")
    assert joined.pk == first.pk
    assert waiting_shown("aborted") == "2"
    warning = browser.get(f"/escalations/{first.pk}/").content.decode()
    assert "b, which joined it from this run, stops waiting, unanswered." in warning
    stopped = browser.post(f"/escalations/{first.pk}/abort/", {"reason": "wrong plan"})
    assert stopped.status_code == 302
    assert waiting_shown("aborted") == "—"


def test_an_artifacts_web_address_is_a_link_and_nothing_else_is(desk, browser):
    from django.utils import timezone

    from runs.models import Artifact

    run = Run.objects.get(key="tier-discounts")
    task = run.tasks.get(key="plan")
    now = timezone.now()
    Artifact.objects.create(task=task, kind="pull_request", ref="acme/shop#7",
                            url="https://forge.example/acme/shop/pull/7", created_at=now)  # fmt: skip
    Artifact.objects.create(task=task, kind="file", ref="notes.md",
                            url="javascript:alert(1)", created_at=now)  # fmt: skip
    page = browser.get(f"/runs/{run.pk}/").content.decode()
    listed = page.split('id="artifacts-title"')[1].split("</section>")[0]
    assert '<a href="https://forge.example/acme/shop/pull/7" rel="noopener noreferrer">' in listed
    assert 'href="javascript' not in listed and "notes.md<br><small>javascript:alert(1)" in listed
