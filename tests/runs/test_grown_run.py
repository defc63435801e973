"""Each event an agent sends about a run grown since PostgreSQL last read its statistics reads
the rows it names, not the run's: every statement of the request, through the signed webhook
(what its commit sets off, the frontier's recompute, reads the run by design and runs after)."""

import json
import uuid
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import TestCase

from escalations.models import Escalation
from escalations.services import escalation_answer
from fleet import services
from fleet.models import Fleet
from runs.claims.hashing import payload_hash
from runs.models import Attempt, Claim, Prerequisite, Run, Task
from tests.conftest import Sender, make_sender, wsgi_headers
from tests.plans import CaptureStatements, generic_rows_read, most_read, rows_read

pytestmark = pytest.mark.postgres

MOST = 10  # rows any one statement may read
READS = ("SELECT", "WITH RECURSIVE")


@pytest.fixture
def planner(client: Any, fleet: Fleet, grown: Run) -> Sender:
    """An orchestrator acting for the run's coder (data.agent), its tasks t2500-t2502 ready."""
    Task.objects.filter(run=grown, key__in=["t2500", "t2501", "t2502"]).update(ready=True)
    return make_sender(client, fleet, "planner", role="planning", orchestrator=True)


def sent(sender: Sender, path: str, body: bytes) -> tuple[Any, CaptureStatements]:
    """The response and the statements of one request; nothing after its commit runs."""
    with CaptureStatements(connection) as queries:
        response = sender.client.generic(
            "POST", path, body, content_type="application/json",
            **wsgi_headers(sender.headers(body)),
        )  # fmt: skip
    return response, queries


def event(sender: Sender, type: str, **data: Any) -> tuple[Any, CaptureStatements]:
    body = sender.body(type, {"run": "r1", "agent": "coder", **data})
    return sent(sender, sender.path, body)


def start(sender: Sender, task: str) -> tuple[Any, CaptureStatements]:
    return event(sender, "task.started", task=task,
                 attempt={"prompt_hash": "p1", "context_hash": "c1"})  # fmt: skip


def reads_its_own(queries: CaptureStatements, *, prepared: bool = True) -> None:
    """No statement reads more than MOST rows; those prepared (the event's task read and its
    writes) also under the plan their connection keeps for them."""
    assert bool(queries.prepared) == prepared
    read, sql = most_read(queries)
    assert read <= MOST, f"{read} rows read by {sql[-900:]}"


def test_a_start_a_check_and_a_failed_finish(planner: Sender) -> None:
    Task.objects.filter(run__key="r1", key="t2501").update(checks=["k2500"])  # its checker
    response, queries = start(planner, "t2501")
    assert response.status_code == 202, response.content
    reads_its_own(queries)

    payload = {"columns": ["tier"], "rows": []}
    evidence = {"kind": "query_result", "source": "SELECT tier FROM customers WHERE k2500",
                "payload": payload, "payload_hash": payload_hash(payload)}  # fmt: skip
    response, queries = event(planner, "claim.checked", task="t2501", claim="k2500",
                              verdict="refuted", evidence=evidence)  # fmt: skip
    assert response.status_code == 202, response.content
    reads_its_own(queries)

    failure = {"kind": "transient", "signature": "timeout", "message": "the read timed out"}
    response, queries = event(planner, "task.finished", task="t2501", outcome="failed",
                              failure=failure)  # fmt: skip
    assert response.status_code == 202, response.content
    reads_its_own(queries)
    assert Attempt.objects.get(task__key="t2501").outcome == "failed"


def packet_on(planner: Sender, task: str) -> tuple[Any, CaptureStatements]:
    assert start(planner, task)[0].status_code == 202
    packet = {
        "task": task,
        "tried": ["read the tier from customers", "read it from accounts"],
        "ruled_out": [{"hypothesis": "renamed column", "how": "listed every column"}],
        "evidence": [
            {
                "kind": "query_result",
                "source": "SELECT * FROM customers",
                "payload_hash": "sha256:" + "9f3a" * 16,
            }
        ],  # fmt: skip
        "smallest_unblocking_question": "Where does a customer's tier come from?",
    }
    return event(planner, "packet.submitted", task=task, packet=packet)


def test_a_packet(planner: Sender) -> None:
    response, queries = packet_on(planner, "t2502")

    assert response.status_code == 202, response.content
    assert response.json()["escalation"]
    reads_its_own(queries)


def test_a_batch_of_claims(planner: Sender) -> None:
    events = [
        {"id": f"evt_{uuid.uuid4().hex}", "type": "claim.posted",
         "timestamp": "2026-12-02T10:00:00Z",
         "data": {"run": "r1", "task": task, "agent": "coder",
                  "claim": {"key": f"new-{task}", "statement": "the column exists"}}}
        for task in ("t5", "t1500", "t2999")
    ]  # fmt: skip
    body = json.dumps({"events": events}).encode()
    response, queries = sent(planner, f"/hooks/v1/agents/{planner.agent.pk}/batches", body)

    assert response.status_code == 200, response.content
    assert [r["status"] for r in response.json()["results"]] == [202, 202, 202]
    assert Claim.objects.filter(key__startswith="new-").count() == 3
    reads_its_own(queries, prepared=False)  # a batch's statements are its own (runs.bulk)


def test_an_answer(planner: Sender, fleet: Fleet, grown: Run) -> None:
    """Its locks find the run and the tasks through the escalation, and its region (the task's
    prerequisites, the work below it, its transaction group, their claims) is read by probes,
    not among all the run's tasks and claims."""
    tasks = {t.key: t for t in Task.objects.filter(run=grown, key__in=["t2501", "t2502",
                                                                      "t2503", "t2504"])}  # fmt: skip
    Prerequisite.objects.bulk_create([
        Prerequisite(task=tasks["t2502"], requires=tasks["t2501"]),
        Prerequisite(task=tasks["t2503"], requires=tasks["t2502"]),
    ])  # fmt: skip
    Task.objects.filter(pk__in=[tasks["t2502"].pk, tasks["t2504"].pk]).update(transaction="g1")
    Task.objects.filter(pk=tasks["t2501"].pk).update(state=Task.State.SUCCEEDED)
    response, _ = packet_on(planner, "t2502")
    escalation = Escalation.objects.get(pk=response.json()["escalation"])
    reviewer, _ = services.member_add(username="rita", fleet=fleet, role="reviewer")

    with (
        TestCase.captureOnCommitCallbacks(execute=False),
        CaptureStatements(connection) as queries,
    ):
        escalation_answer(escalation=escalation, reviewer=reviewer, text="From accounts.tier")

    assert Task.objects.get(run__key="r1", key="t2502").state == Task.State.PENDING
    read_region = [q["sql"] for q in queries.captured_queries if "region(id)" in q["sql"]]
    assert len(read_region) == 1
    with connection.cursor() as cursor:
        cursor.execute(read_region[0])
        kinds = {(kind, len(rows)) for kind, _, rows in cursor.fetchall()}
    assert {("t", 4), ("p", 2), ("c", 5)} <= kinds, kinds  # k2501-k2504 and the answer's
    reads = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().startswith(READS)]
    assert len(reads) == 5  # the four locks and the region (the one write already ran)
    for sql in reads:
        with transaction.atomic():
            read = rows_read(sql)
            transaction.set_rollback(True)
        # The region is 4 tasks, 2 edges and 5 claims (14 rows in all, with the fleet's and the
        # task's history), and the index entries of their rows' earlier versions.
        assert read <= (30 if sql in read_region else MOST), f"{read} rows read by {sql[:900]}"
    # The four locks and the region are prepared, planned once for any values (`fleet.prepared`):
    # that plan reads as few.
    planned = [(sql, values) for sql, values in queries.prepared if sql.lstrip().startswith(READS)]
    assert len(planned) == 5
    for sql, values in planned:
        with transaction.atomic():
            read = generic_rows_read(sql, values)
            transaction.set_rollback(True)
        assert read <= (30 if "region(id)" in sql else MOST), f"{read} rows read by {sql[:900]}"
