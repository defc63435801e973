"""Twenty copies of one event at the same moment apply once (PostgreSQL, real transactions)."""

import json
import threading

import pytest
from django.db import connection
from django.test import Client

from fleet.models import Event
from runs.models import Run, Task
from tests.conftest import task, wsgi_headers


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_twenty_simultaneous_copies_apply_once_and_get_the_first_response(planner, coder):
    body = planner.body(
        "run.started", {"run": "r1", "tasks": [task("a"), task("b", prerequisites=["a"])]}
    )
    headers = planner.headers(body, webhook_id="msg_twenty")
    barrier = threading.Barrier(20)
    responses: list = []
    lock = threading.Lock()

    def send() -> None:
        client = Client()
        extra = wsgi_headers(headers)
        barrier.wait()
        response = client.generic(
            "POST", planner.path, body, content_type="application/json", **extra
        )
        with lock:
            responses.append((response.status_code, response.json()))
        connection.close()

    threads = [threading.Thread(target=send) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert [status for status, _ in responses] == [202] * 20
    assert len({json.dumps(body, sort_keys=True) for _, body in responses}) == 1
    assert Event.objects.filter(webhook_id="msg_twenty").count() == 1
    assert Run.objects.count() == 1
    assert Task.objects.count() == 2


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_simultaneous_different_ids_for_one_run_leave_one_run(planner, coder):
    body_data = {"run": "r1", "tasks": [task("a")]}
    barrier = threading.Barrier(5)
    statuses: list[int] = []

    def send(i: int) -> None:
        client = Client()
        body = planner.body("run.started", body_data)
        extra = wsgi_headers(planner.headers(body, webhook_id=f"msg_{i}"))
        barrier.wait()
        response = client.generic(
            "POST", planner.path, body, content_type="application/json", **extra
        )
        statuses.append(response.status_code)
        connection.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [202] * 5
    assert Run.objects.count() == 1
    assert Task.objects.count() == 1
