"""The Python client's batches against a live Bulkhead.

Non-gating events buffered and sent in one signed batch; the answer lost once (a 503 after
Bulkhead applied it), so the client sends the same batch again: every event applied once; a
refused event of a batch raises BatchRefused with every event's result."""

import pytest

from bulkhead_client import BatchRefused, Bulkhead, Task
from fleet import services
from fleet.models import Event
from runs.models import Claim
from runs.models import Task as TaskRow
from tests.clients.conftest import credentials
from tests.clients.proxy import LosingProxy

pytestmark = [pytest.mark.postgres, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_batch_of_non_gating_events_is_applied_once_through_a_lost_answer(live_app):
    fleet = services.fleet_create(name="acme")
    orch = credentials(live_app, fleet, "orch", orchestrator=True)
    credentials(live_app, fleet, "planner")
    bh = Bulkhead(endpoint=orch.endpoint, secret=orch.secret, token=orch.token)
    run = bh.declare_run("r1", [Task(key="a", agent="planner"), Task(key="b", agent="planner")])
    for key in ("a", "b"):
        run.start(key, prompt_hash="p", context_hash="c", agent="planner")

    proxy = LosingProxy(
        live_app.url, lambda path, headers, body: path.endswith("/batches") and not proxy.seen
    )
    try:
        via_proxy = Bulkhead(
            endpoint=orch.endpoint.replace(live_app.url, proxy.url), secret=orch.secret
        )
        with via_proxy.batch() as batch:
            batch.add("claim.posted", {"run": "r1", "task": "a", "agent": "planner",
                                       "claim": {"key": "a.k", "statement": "`x` holds"}})  # fmt: skip
            for key in ("a", "b"):
                batch.add(
                    "task.finished",
                    {"run": "r1", "task": key, "agent": "planner", "outcome": "succeeded"},
                )
    finally:
        proxy.stop()
    first, again = proxy.seen
    assert (first.answered, again.answered) == (503, 200)
    assert (first.headers["webhook-id"], first.body) == (again.headers["webhook-id"], again.body)
    assert [r.status for r in batch.results] == [202, 202, 202]
    assert Claim.objects.filter(key="a.k").count() == 1
    assert Event.objects.filter(type="task.finished").count() == 2
    assert set(TaskRow.objects.values_list("state", flat=True)) == {"succeeded"}

    refused = bh.batch()
    refused.add(
        "task.finished", {"run": "r1", "task": "nope", "agent": "planner", "outcome": "succeeded"}
    )
    with pytest.raises(BatchRefused) as raised:
        refused.flush()
    [result] = raised.value.results
    assert result.status == 422 and any(e["loc"].endswith("data.task") for e in raised.value.errors)
