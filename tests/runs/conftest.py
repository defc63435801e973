"""Shared fixtures for the runs' tests: the seed's PhoenixDX fleet, more agents, open blockers."""

from typing import Any

import pytest

from fleet.models import Fleet
from runs.models import Blocker
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
