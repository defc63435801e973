"""The desk's reads of blast radius and handoff coverage, from what the database recorded."""

import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import call_command

from escalations.selectors.radius import handoffs_for, handoffs_for_fleet, radii_for
from fleet import services
from fleet.models import Event
from runs.claims.hashing import http_exchange_payload, payload_hash
from runs.models import ClaimUse, Run
from tests.fixtures.orders import REAL_COLUMNS, OrdersDatabase
from tests.fixtures.orders import orders_database as orders_database  # noqa: F401
from tests.fixtures.orders import orders_postgresql as orders_postgresql  # noqa: F401
from tests.fixtures.orders import orders_postgresql_session as orders_postgresql_session  # noqa: F401
from tests.fixtures.seed import ALL_GREEN_RUN, ATTEMPT, at, late_artifacts_run, phoenixdx

pytestmark = pytest.mark.django_db

RUN = "tier-discounts"
AN_HOUR_IN = datetime(2026, 6, 2, 10, 0, tzinfo=UTC)  # the pure tests' `now`


def imported(fleet: str = "acme", path: Path = ALL_GREEN_RUN) -> Run:
    call_command("import_events", fleet, str(path), stdout=io.StringIO())
    keys = {json.loads(line)["data"].get("run") for line in path.read_text().splitlines()}
    return Run.objects.get(fleet__name=fleet, key__in=keys)


def handoff(producer, consumer, claims, checkable, refuted, minutes, unchecked=()):
    return {
        "producer": producer,
        "consumer": consumer,
        "claims": claims,
        "checkable": checkable,
        "refuted": refuted,
        "median_unchecked_minutes": minutes,
        "unchecked": unchecked,
    }


def test_it_measures_every_claim_of_the_all_green_run(client, fleet):
    phoenixdx(client, fleet)
    run = imported()

    assert radii_for(run, now=AN_HOUR_IN) == {
        "plan.customer-tier": {
            "agents": 3,
            "artifacts": 4,
            "minutes": 40.0,
            "tasks": ["api-change", "api-tests", "confirm-schema", "discount-resolver"],
        },
        # Never checked: it counts to now, with everything built on it so far.
        "schema.customer-tier-confirmed": {
            "agents": 2,
            "artifacts": 4,
            "minutes": 56.0,
            "tasks": ["api-change", "api-tests", "discount-resolver"],
        },
        "tests.pass": {"agents": 0, "artifacts": 0, "minutes": 1.0, "tasks": []},
    }


def test_it_counts_only_the_artifacts_reported_before_the_check(client, fleet, tmp_path):
    seed = phoenixdx(client, fleet)
    run = imported(path=late_artifacts_run(tmp_path / "late.jsonl"))

    radius = {"agents": 3, "artifacts": 1, "minutes": 7.0, "tasks": ["b", "chk", "e"]}
    assert radii_for(run, now=AN_HOUR_IN)["c1"] == radius
    [c1] = seed.get(client, f"/api/v1/runs/{run.key}").json()["claims"]
    assert c1["blast_radius"] == radius


def test_the_packet_pages_summary_counts_the_artifacts_as_the_claims_radius_does(
    client, fleet, tmp_path
):
    """The packet page sums its claims' reach: it counted every artifact of the tasks reached,
    the 3 PRs reported 22 minutes after the check among them (4, not 1)."""
    from escalations.selectors.attempts import claims_of_task
    from escalations.selectors.packet import blast_of, claim_view

    phoenixdx(client, fleet)
    run = imported(path=late_artifacts_run(tmp_path / "late.jsonl"))
    claims = claims_of_task(run.tasks.get(key="a"))
    radii = radii_for(run, now=AN_HOUR_IN)
    rows = [claim_view(c, radii.get(c.key)) for c in claims]

    blast = blast_of(run, claims, rows, now=AN_HOUR_IN)

    assert (blast["tasks"], blast["agents"], blast["artifacts"]) == (["b", "chk", "e"], 3, 1)
    assert blast["minutes"] == 7.0


def test_an_unchecked_claim_keeps_counting_until_now(client, fleet):
    phoenixdx(client, fleet)
    run = imported()

    later = radii_for(run, now=datetime(2026, 6, 2, 11, 0, tzinfo=UTC))

    assert later["schema.customer-tier-confirmed"]["minutes"] == 116.0
    assert later["plan.customer-tier"]["minutes"] == 40.0
    assert radii_for(run)["schema.customer-tier-confirmed"]["minutes"] > 116.0


def test_it_reads_a_run_in_six_queries_however_big(client, fleet, django_assert_max_num_queries):
    seed = phoenixdx(client, fleet)
    run = imported()
    with django_assert_max_num_queries(6):
        radii_for(run)
    tasks = [
        {"key": f"t{i}", "agent": "coder-a", "prerequisites": [f"t{i - 1}"] if i else []}
        for i in range(300)
    ]
    seed.planner.post("run.started", {"run": "big", "tasks": tasks})
    claim = {"key": "t0.done", "statement": "t0 is done"}
    seed.coder_a.post("claim.posted", {"run": "big", "task": "t0", "claim": claim})
    big = Run.objects.get(key="big")
    with django_assert_max_num_queries(6):
        assert radii_for(big)["t0.done"]["agents"] == 0


def test_it_maps_the_all_green_runs_handoffs_none_of_them_checkable(client, fleet):
    phoenixdx(client, fleet)
    run = imported()

    tier, confirmed = ("plan.customer-tier",), ("schema.customer-tier-confirmed",)
    assert handoffs_for(run, now=AN_HOUR_IN) == [
        handoff("planner", "coder-a", 1, 0, 1, 40.0, tier),
        handoff("planner", "schema", 1, 0, 1, 40.0, tier),
        handoff("schema", "coder-a", 1, 0, 0, 56.0, confirmed),
        handoff("schema", "coder-b", 1, 0, 0, 56.0, confirmed),
    ]


def test_a_handoff_with_evidence_counts_as_checkable(
    client, fleet, orders_database: OrdersDatabase
):
    seed = phoenixdx(client, fleet)
    services.source_add(fleet=fleet, kind="datasource", name="orders", value=orders_database.dsn)
    tasks = [
        {"key": "plan", "agent": "planner"},
        {
            "key": "points",
            "agent": "coder-a",
            "prerequisites": ["plan"],
            "consumes": ["plan.points"],
        },
    ]
    seed.planner.post("run.started", {"run": RUN, "tasks": tasks}, received=at(0))
    seed.planner.post("task.started", {"run": RUN, "task": "plan", "attempt": ATTEMPT})
    claim = {
        "key": "plan.points",
        "statement": "`customers` has `loyalty_points`",
        "evidence": orders_database.columns_evidence(REAL_COLUMNS),
    }
    seed.planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": claim})
    seed.planner.post("task.finished", {"run": RUN, "task": "plan", "outcome": "succeeded"})
    started = seed.coder_a.post("task.started", {"run": RUN, "task": "points", "attempt": ATTEMPT})
    assert started.status_code == 202

    [crossing] = handoffs_for(Run.objects.get(key=RUN))

    assert (crossing["producer"], crossing["consumer"]) == ("planner", "coder-a")
    assert (crossing["claims"], crossing["checkable"], crossing["refuted"]) == (1, 1, 0)


def test_evidence_nothing_can_re_check_is_not_checkable(
    client, fleet, orders_database: OrdersDatabase
):
    # Real-looking evidence on sources the fleet never registered: the verifier leaves each claim
    # unverified ("no data source named 'nosuch' is registered"), and so must the handoffs.
    seed = phoenixdx(client, fleet)
    services.source_add(fleet=fleet, kind="datasource", name="orders", value=orders_database.dsn)
    url = "https://api.example.com/v1/customers/42"  # no host is allowed for the fleet
    exchange = http_exchange_payload(method="GET", url=url, status=200, body_sha256="0" * 64)
    posted = {
        "plan.nosuch": orders_database.columns_evidence(REAL_COLUMNS, datasource="nosuch"),
        "plan.host": {
            "kind": "http_exchange",
            "source": url,
            "payload_hash": payload_hash(exchange),
            "payload": exchange,
        },
        "plan.points": orders_database.columns_evidence(REAL_COLUMNS),
    }
    tasks = [
        {"key": "plan", "agent": "planner"},
        {"key": "build", "agent": "coder-a", "prerequisites": ["plan"], "consumes": list(posted)},
    ]
    seed.planner.post("run.started", {"run": RUN, "tasks": tasks}, received=at(0))
    seed.planner.post("task.started", {"run": RUN, "task": "plan", "attempt": ATTEMPT})
    for key, evidence in posted.items():
        claim = {"key": key, "statement": "`customers` has `loyalty_points`", "evidence": evidence}
        seed.planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": claim})
    run = Run.objects.get(key=RUN)
    build = run.tasks.get(key="build")
    for claim in run.claims.all():  # what the coder's start would record, had it been let start
        ClaimUse.objects.get_or_create(claim=claim, task=build, defaults={"at": claim.posted_at})

    [crossing] = handoffs_for(run)
    [row] = handoffs_for_fleet([fleet.pk])

    assert (crossing["claims"], crossing["checkable"]) == (3, 1)
    assert crossing["unchecked"] == ("plan.host", "plan.nosuch")
    assert (row["claims"], row["checkable"]) == (3, 1)
    assert sorted(c["key"] for c in row["unchecked"]) == ["plan.host", "plan.nosuch"]


def test_a_fleets_handoffs_merge_its_runs_and_keep_fleets_apart(client, fleet, tmp_path):
    phoenixdx(client, fleet)
    imported()
    second = tmp_path / "second.jsonl"
    second.write_text(
        ALL_GREEN_RUN.read_text().replace(f'"run": "{RUN}"', '"run": "tier-discounts-2"')
    )
    imported(path=second)
    other = services.fleet_create(name="beta")
    phoenixdx(client, other)
    imported("beta")

    rows = handoffs_for_fleet([fleet.pk, other.pk], now=AN_HOUR_IN)

    acme = [r for r in rows if r["fleet"] == "acme"]
    beta = [r for r in rows if r["fleet"] == "beta"]
    assert [(r["producer"], r["consumer"], r["claims"], r["refuted"]) for r in acme] == [
        ("planner", "coder-a", 2, 2),
        ("planner", "schema", 2, 2),
        ("schema", "coder-a", 2, 0),
        ("schema", "coder-b", 2, 0),
    ]
    assert [r["claims"] for r in beta] == [1, 1, 1, 1]
    assert acme[0]["median_unchecked_minutes"] == 40.0
    assert handoffs_for_fleet([other.pk], now=AN_HOUR_IN) == beta
    assert handoffs_for_fleet([]) == []


# Honest minutes: the server's clock for live events, and nothing counts past the run's end.


def at_time(minutes: float) -> datetime:
    return datetime.fromisoformat(at(minutes))


def test_an_agents_own_timestamps_do_not_stretch_a_live_claims_minutes(client, fleet):
    seed = phoenixdx(client, fleet)
    tasks = [{"key": "plan", "agent": "planner"}]
    seed.planner.post("run.started", {"run": RUN, "tasks": tasks}, received=at(0))
    seed.planner.post(
        "task.started", {"run": RUN, "task": "plan", "attempt": ATTEMPT}, received=at(0)
    )
    claim = {"key": "plan.x", "statement": "the plan holds", "load_bearing": False}
    # A careless agent's clock: a year behind the server's.
    seed.planner.post(
        "claim.posted",
        {"run": RUN, "task": "plan", "claim": claim},
        timestamp="2025-06-02T09:01:00Z",
        received=at(1),
    )
    run = Run.objects.get(key=RUN)

    assert radii_for(run, now=at_time(3))["plan.x"]["minutes"] == 2.0
    assert Event.objects.get(type="claim.posted").occurred_at.year == 2025  # kept, not used


def test_a_finished_runs_unchecked_claim_stops_growing_at_its_end(client, fleet):
    seed = phoenixdx(client, fleet)
    tasks = [{"key": "plan", "agent": "planner"}]
    seed.planner.post("run.started", {"run": RUN, "tasks": tasks}, received=at(0))
    seed.planner.post(
        "task.started", {"run": RUN, "task": "plan", "attempt": ATTEMPT}, received=at(0)
    )
    claim = {"key": "plan.x", "statement": "the plan holds", "load_bearing": False}
    seed.planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": claim}, received=at(1))
    seed.planner.post(
        "task.finished", {"run": RUN, "task": "plan", "outcome": "succeeded"}, received=at(5)
    )
    run = Run.objects.get(key=RUN)
    assert (run.state, run.finished_at) == ("succeeded", at_time(5))

    assert radii_for(run, now=at_time(60))["plan.x"]["minutes"] == 4.0
    assert radii_for(run)["plan.x"]["minutes"] == 4.0  # months later, on the real clock
    assert handoffs_for_fleet([fleet.pk], now=at_time(600)) == []
