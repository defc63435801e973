"""Shared fixtures for the runs' tests: the seed's PhoenixDX fleet, more agents, open blockers."""

from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from fleet import rows, services
from fleet.models import Fleet
from runs.models import Blocker, Claim, Run, Task
from tests.conftest import Sender, make_sender
from tests.fixtures.seed import PhoenixDX, phoenixdx


@pytest.fixture
def seed(client: Any, fleet: Fleet) -> PhoenixDX:
    return phoenixdx(client, fleet)


@pytest.fixture
def coder2(client: Any, fleet: Fleet) -> Sender:
    return make_sender(client, fleet, "coder-2", role="coding")


@pytest.fixture
def pr_tool(client: Any, fleet: Fleet) -> Sender:
    """The deterministic step that checks for the PR (a tool: it fails the same way again)."""
    return make_sender(client, fleet, "pr-check", role="delivery", tool=True)


def open_codes(key: str) -> set[str]:
    return set(
        Blocker.objects.filter(task__key=key, cleared_at=None).values_list("code", flat=True)
    )


SIZE = 3_000


@pytest.fixture
def grown(fleet: Fleet) -> Run:
    """A run of SIZE tasks with a claim each, the last of SIZE runs of its fleet, all grown after
    the tables were last analyzed (empty): for the tests that a look-up reads the rows it names,
    not the run's or the fleet's."""
    agent, _, _ = services.agent_create(fleet=fleet, name="coder", role="coding")
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_run, runs_task, runs_claim, runs_attempt, runs_frontierchange")
    Run.objects.bulk_create(
        Run(fleet=fleet, key=f"other{n}", started_by=agent, started_at=now) for n in range(SIZE)
    )
    run = Run.objects.create(fleet=fleet, key="r1", started_by=agent, started_at=now)
    tasks = [
        Task(run=run, key=f"t{n}", agent=agent, position=n, created_at=now) for n in range(SIZE)
    ]
    Task.objects.bulk_create(tasks)
    rows.insert(
        [
            Claim(run=run, task=t, key=f"k{n}", statement="s", posted_at=now)
            for n, t in enumerate(tasks)
        ]
    )
    return run
