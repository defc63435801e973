"""An event's webhook-id is looked up among its agent's events one index probe each: an agent
whose thousands of events were stored since PostgreSQL last read the table's statistics does
not have them read again on each event or batch (the run's own rows: tests/runs/test_grown_run)."""

import json
import uuid
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet import rows
from fleet.models import Event
from tests.conftest import Sender, task, wsgi_headers
from tests.plans import most_read

pytestmark = pytest.mark.postgres

STORED = 3_000
MOST = 10  # rows any one statement may read


@pytest.fixture
def busy(planner: Sender) -> Sender:
    """The planner, with STORED events stored after the events' table was last analyzed."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE fleet_event")
    now = timezone.now()
    rows.insert(
        [
            rows.new(
                Event,
                fleet_id=planner.agent.fleet_id,
                agent_id=planner.agent.pk,
                webhook_id=f"old-{n}",
                body_sha256="0" * 64,
                type="claim.posted",
                data={},
                occurred_at=now,
                received_at=now,
                response_status=202,
                response={"type": "claim.posted"},
            )  # fmt: skip
            for n in range(STORED)
        ]
    )
    return planner


def sent(sender: Sender, path: str, body: bytes, webhook_id: str | None = None) -> Any:
    with CaptureQueriesContext(connection) as queries:
        response = sender.client.generic(
            "POST", path, body, content_type="application/json",
            **wsgi_headers(sender.headers(body, webhook_id=webhook_id)),
        )  # fmt: skip
    read, sql = most_read(queries)
    assert read <= MOST, f"{read} rows read by {sql}"
    return response


def test_an_event_and_a_replayed_id(busy: Sender) -> None:
    body = busy.body("run.started", {"run": "r1", "tasks": [task("a", agent="planner")]})

    assert sent(busy, busy.path, body).status_code == 202
    assert sent(busy, busy.path, body, webhook_id="old-1234").status_code == 409


def test_a_batch(busy: Sender) -> None:
    events = [
        {"id": id, "type": "run.started", "timestamp": "2026-12-02T10:00:00Z",
         "data": {"run": run, "tasks": [task("a", agent="planner")]}}
        for id, run in ((f"evt_{uuid.uuid4().hex}", "r1"), ("old-2999", "r2"))
    ]  # fmt: skip
    body = json.dumps({"events": events}).encode()

    response = sent(busy, f"/hooks/v1/agents/{busy.agent.pk}/batches", body)

    assert response.status_code == 200, response.content
    assert [r["status"] for r in response.json()["results"]] == [202, 409]
