"""The frontier's facts of several runs read in one statement on PostgreSQL are the very nodes
and world that `nodes_for` and `world_for` read run by run."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet.models import Capability
from runs import release, scheduler
from runs.frontier import frontier
from runs.models import Claim, Halt, Hold, Run, Task
from runs.release import released_by
from tests.conftest import on_postgres, task

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(planner, coder, fleet) -> list[Run]:
    for key in ("r1", "r2"):
        tasks = [
            task("a", capabilities=["forge"], transaction="g", consumes=["k0"]),
            task("b", prerequisites=["a"], reads_state_of=["db"], checks=["k1"]),
            task("c", prerequisites=["a", "b"], transaction="g", effect="external"),
        ]
        assert planner.post("run.started", {"run": key, "tasks": tasks}).status_code == 202
    now = timezone.now()
    Capability.objects.update_or_create(
        fleet=fleet, name="forge", defaults={"status": Capability.Status.DOWN}
    )
    Capability.objects.update_or_create(
        fleet=fleet, name="db", defaults={"status": Capability.Status.UP, "role": "database"}
    )
    r1 = Run.objects.get(key="r1")
    a, b = Task.objects.get(run=r1, key="a"), Task.objects.get(run=r1, key="b")
    claim = Claim.objects.create(run=r1, task=a, key="k1", statement="x", posted_at=now)
    Claim.objects.create(
        run=r1, task=b, key="k2", statement="y", posted_at=now, status="refuted", superseded=True
    )
    Halt.objects.create(task=b, claim=claim, key="k1", attempt=1, reason="r", halted_at=now)
    Hold.objects.create(task=b, code="escalation:7", placed_at=now)
    Hold.objects.create(task=b, code="escalation:3", placed_at=now)
    Hold.objects.create(task=a, code="escalation:9", placed_at=now, lifted_at=now)
    return list(Run.objects.select_related("fleet").order_by("key"))


def test_the_facts_of_several_runs_are_what_each_run_reads_alone(runs):
    with CaptureQueriesContext(connection) as queries:
        facts = scheduler.facts_for(runs)
    if on_postgres():
        assert len(queries.captured_queries) == 1
    for run in runs:
        assert facts[run.pk] == (scheduler.nodes_for(run), scheduler.world_for(run)), run.key
    nodes, world = facts[runs[0].pk]
    assert nodes["c"].prerequisites == ("a", "b") and nodes["b"].halted_on == ("k1",)
    assert world.escalations == {"b": ("7", "3")} and world.down == frozenset({"forge"})
    assert world.claims["k2"].producer is None and world.claims["k1"].producer == "a"


@pytest.fixture
def wide_run(planner, coder, fleet) -> Run:
    """A run whose regions differ: a transaction group reaching another branch, a claim
    consumed across branches, a halt, a hold, and work beside the rest."""
    tasks = [
        task("root"),
        task("a", prerequisites=["root"]),
        task("b", prerequisites=["a"]),
        task("c", prerequisites=["a"], transaction="g"),
        task("far"),
        task("peer", prerequisites=["far"], transaction="g"),
        task("under-peer", prerequisites=["peer"]),
        task("beside", prerequisites=["root"], consumes=["k.far"]),
        task("alone"),
    ]
    assert planner.post("run.started", {"run": "wide", "tasks": tasks}).status_code == 202
    run = Run.objects.select_related("fleet").get(key="wide")
    now = timezone.now()
    of = {t.key: t for t in Task.objects.filter(run=run)}
    Claim.objects.create(run=run, task=of["far"], key="k.far", statement="x", posted_at=now,
                         load_bearing=True)  # fmt: skip
    refuted = Claim.objects.create(run=run, task=of["root"], key="k.root", statement="y",
                                   posted_at=now, status="refuted")  # fmt: skip
    Claim.objects.create(run=run, task=of["alone"], key="answer.escalation-1", statement="z",
                         posted_at=now, status="verified")  # fmt: skip
    Halt.objects.create(task=of["b"], claim=refuted, key="k.root", attempt=1, reason="r",
                        halted_at=now)  # fmt: skip
    Hold.objects.create(task=of["c"], code="escalation:4", placed_at=now)
    Task.objects.filter(pk=of["far"].pk).update(state="succeeded")
    return run


@pytest.mark.parametrize("key", ["a", "b", "peer", "beside", "alone"])
def test_a_region_read_gives_the_runs_own_frontier_for_its_tasks(wide_run, key):
    task_id = Task.objects.get(run=wide_run, key=key).pk
    nodes, world = scheduler.facts_for([wide_run])[wide_run.pk]

    with CaptureQueriesContext(connection) as queries:
        read = scheduler.facts_for(
            [wide_run], around=[task_id], keys=["answer.escalation-1", "answer.escalation-2"]
        )[wide_run.pk]
    some, its_world = read

    whole, part = frontier(nodes, world), frontier(some, its_world)
    assert set(part.ready) == set(whole.ready) & some.keys()
    assert part.deferred == {k: v for k, v in whole.deferred.items() if k in some}
    assert released_by(some, its_world, key) == released_by(nodes, world, key)
    assert "answer.escalation-1" in its_world.claims  # asked for by name, wherever it is
    if on_postgres():
        assert len(queries.captured_queries) == 1
        assert some.keys() == release.region(nodes, [key])  # and nothing more
        assert some == {k: nodes[k] for k in some}


def test_a_run_under_a_global_halt_is_read_whole(wide_run):
    Run.objects.filter(pk=wide_run.pk).update(policy=Run.Policy.GLOBAL_HALT)
    wide_run.refresh_from_db()
    alone = Task.objects.get(run=wide_run, key="alone").pk

    nodes, _ = scheduler.facts_for([wide_run], around=[alone])[wide_run.pk]

    assert len(nodes) == 9
