"""Shared fixtures: a fleet with agents, a signed-webhook client, the real worker, service checks."""

import json
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from fleet import services, signing
from fleet.celery import app as celery_app
from fleet.models import Agent, Fleet

REQUIRE_SERVICES = os.environ.get("BULKHEAD_REQUIRE_SERVICES", "") == "1"


def on_postgres() -> bool:
    return connection.vendor == "postgresql"


def needs(service: str, available: bool) -> None:
    """A test that needs a missing service skips locally and fails where services are required."""
    if available:
        return
    if REQUIRE_SERVICES:
        pytest.fail(f"needs {service}, which this run is configured to have")
    pytest.skip(f"needs {service}")


@pytest.fixture(autouse=True)
def required_services(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("postgres"):
        needs("PostgreSQL (set DATABASE_URL=postgresql://...)", on_postgres())


@pytest.fixture(autouse=True)
def eager_celery(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tasks run inline unless the test drives a real worker."""
    eager = request.node.get_closest_marker("worker") is None
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = eager
    yield
    celery_app.conf.task_always_eager = previous


@pytest.fixture(autouse=True)
def clear_cache() -> Iterator[None]:
    from django.core.cache import cache

    cache.clear()
    yield


class Sender:
    """An agent that signs and posts events to the webhook, as a real agent would."""

    def __init__(self, client: Any, agent: Agent, secret: str) -> None:
        self.client = client
        self.agent = agent
        self.secret = secret

    @property
    def path(self) -> str:
        return f"/hooks/v1/agents/{self.agent.pk}/events"

    def body(self, type: str, data: dict[str, Any], timestamp: str | None = None) -> bytes:
        envelope = {"type": type, "timestamp": timestamp or "2026-12-02T10:00:00Z", "data": data}
        return json.dumps(envelope).encode()

    def headers(self, body: bytes, *, webhook_id: str | None = None, stamp: int | None = None, secret: str | None = None) -> dict[str, str]:
        return signing.sign(
            secret or self.secret,
            msg_id=webhook_id or f"msg_{uuid.uuid4().hex}",
            timestamp=stamp if stamp is not None else int(time.time()),
            body=body,
        )

    def post_raw(self, body: bytes, headers: dict[str, str], content_type: str = "application/json") -> Any:
        extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
        return self.client.generic("POST", self.path, body, content_type=content_type, **extra)

    def post(self, type: str, data: dict[str, Any], *, webhook_id: str | None = None, timestamp: str | None = None) -> Any:
        body = self.body(type, data, timestamp)
        return self.post_raw(body, self.headers(body, webhook_id=webhook_id))


@pytest.fixture
def fleet(db: None) -> Fleet:
    return services.fleet_create(name="acme")


def make_sender(client: Any, fleet: Fleet, name: str, **kwargs: Any) -> Sender:
    agent, secret, _ = services.agent_create(fleet=fleet, name=name, **kwargs)
    return Sender(client, agent, secret)


@pytest.fixture
def planner(client: Any, fleet: Fleet) -> Sender:
    return make_sender(client, fleet, "planner", role="planning", orchestrator=True)


@pytest.fixture
def coder(client: Any, fleet: Fleet) -> Sender:
    return make_sender(client, fleet, "coder", role="coding")


def task(key: str, agent: str = "coder", **fields: Any) -> dict[str, Any]:
    return {"key": key, "agent": agent, "prerequisites": [], "capabilities": [], **fields}
