"""The frontier's facts of several runs read in one statement on PostgreSQL are the very nodes
and world that `nodes_for` and `world_for` read run by run."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet.models import Capability
from runs import scheduler
from runs.models import Claim, Halt, Hold, Run, Task
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
