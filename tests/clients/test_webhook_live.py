"""The webhook behind gunicorn, as a client that streams its body sends it: chunked, with no
Content-Length (Django alone reads no body then; the server ends the input for it)."""

import http.client
import json
import time
import uuid
from urllib.parse import urlsplit

import pytest

from fleet import services, signing
from runs.models import Run
from tests.clients.conftest import credentials
from tests.conftest import task

pytestmark = [pytest.mark.postgres, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_chunked_event_is_applied_behind_gunicorn(live_app):
    fleet = services.fleet_create(name="acme")
    orch = credentials(live_app, fleet, "orch", orchestrator=True)
    credentials(live_app, fleet, "coder")
    body = json.dumps(
        {"type": "run.started", "timestamp": "2026-12-02T10:00:00Z",
         "data": {"run": "r1", "tasks": [task("a"), task("b", prerequisites=["a"])]}}
    ).encode()  # fmt: skip
    headers = signing.sign(
        orch.secret, msg_id=f"msg_{uuid.uuid4().hex}", timestamp=int(time.time()), body=body
    )
    url = urlsplit(orch.endpoint)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    try:  # an iterable body with no Content-Length: http.client sends it chunked
        connection.request(
            "POST",
            url.path,
            body=iter([body[:40], body[40:]]),
            headers={**headers, "content-type": "application/json"},
        )
        response = connection.getresponse()
        answer = json.loads(response.read())
    finally:
        connection.close()

    assert response.status == 202, answer
    assert answer["tasks"] == 2
    assert Run.objects.get(fleet=fleet, key="r1").tasks.count() == 2
