"""The demo fleet: agents, members and runs, posted through the real intake (idempotent)."""

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction

from fleet import intake, services
from fleet.models import Agent, Fleet, Membership

FLEET = "demo"
AGENTS = [
    ("orchestrator", "orchestration", True),
    ("planner", "planning", False),
    ("schema-agent", "schema", False),
    ("coder-1", "coding", False),
    ("coder-2", "coding", False),
]


def post(agent: Agent, type: str, data: dict[str, Any], *, key: str, at: datetime) -> intake.Reply:
    """Apply an event as the agent would post it; the key makes reloading idempotent."""
    envelope = {"type": type, "timestamp": at.isoformat(), "data": data}
    body = json.dumps(envelope, sort_keys=True).encode()
    webhook_id = "demo_" + uuid.uuid5(uuid.NAMESPACE_URL, f"{FLEET}/{key}").hex
    return intake.apply(agent=agent, webhook_id=webhook_id, body=body, raw=envelope)


@transaction.atomic
def fleet_and_people() -> Fleet:
    fleet = services.fleet_create(name=FLEET)
    for name, role, orchestrator in AGENTS:
        if not Agent.objects.filter(fleet=fleet, name=name).exists():
            services.agent_create(fleet=fleet, name=name, role=role, orchestrator=orchestrator)
    for username, role in (
        ("reviewer", Membership.Role.REVIEWER),
        ("manager", Membership.Role.MANAGER),
    ):
        services.member_add(username=username, fleet=fleet, role=role)
    return fleet


def load() -> dict[str, Any]:
    fleet = fleet_and_people()
    orchestrator = Agent.objects.get(fleet=fleet, name="orchestrator")
    at = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    tasks = [
        {"key": "plan", "agent": "planner", "title": "Plan the change"},
        {
            "key": "schema",
            "agent": "schema-agent",
            "prerequisites": ["plan"],
            "title": "Check the schema",
        },
        {
            "key": "code-1",
            "agent": "coder-1",
            "prerequisites": ["schema"],
            "capabilities": ["forge"],
        },
        {
            "key": "code-2",
            "agent": "coder-2",
            "prerequisites": ["schema"],
            "capabilities": ["forge"],
        },
    ]
    post(
        orchestrator,
        "run.started",
        {"run": "demo-1", "title": "A first run", "tasks": tasks},
        key="demo-1",
        at=at,
    )
    post(
        orchestrator,
        "task.started",
        {
            "run": "demo-1",
            "task": "plan",
            "agent": "planner",
            "attempt": {"prompt_hash": "p1", "context_hash": "c1"},
        },
        key="demo-1/plan/start",
        at=at + timedelta(minutes=1),
    )
    return {"fleet": fleet.name, "runs": ["demo-1"], "agents": [name for name, _, _ in AGENTS]}
