"""A batch's claim.posted events are looked up together and written in bulk, with the very
results and rows that posting them one by one gives."""

import uuid
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.models import Claim, ClaimUse, Evidence
from tests.conftest import Sender, task
from tests.fleet.test_batches import event, post_batch

HASHES = {"prompt_hash": "sha256:" + "a" * 64, "context_hash": "sha256:" + "b" * 64}
QUERY = {
    "kind": "query_result",
    "source": "SELECT tier FROM customers",
    "payload_hash": "sha256:" + "c" * 64,
}


def claim(run: str, task_key: str, key: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    body = {"key": key, "statement": f"`customers` has `{key}`", **fields.pop("claim", {})}
    return "claim.posted", {"run": run, "task": task_key, "claim": body, **fields}


def story(run: str) -> list[tuple[str, dict[str, Any]]]:
    """Every way a claim in a stretch can go: the common ones, and each that is posted alone."""
    return [
        claim(run, "a", "k1"),
        claim(run, "a", "k2", claim={"evidence": QUERY}),
        claim(run, "a", "k3", claim={"evidence": {**QUERY, "source": "the planner said so"}}),
        claim(run, "a", "k4", claim={"statement": "all is well", "evidence": QUERY}),
        claim(run, "a", "k1"),  # taken earlier in the stretch
        claim(run, "a", "old"),  # taken before the batch
        claim(run, "a", "k5", claim={"load_bearing": False}),
        claim(run, "p", "k6"),  # the planner's task
        claim(run, "nope", "k7"),
        claim("no-run", "a", "k8"),
        claim(run, "a", "k9", agent="planner"),  # only an orchestrator acts for another
        claim(run, "a", "k10"),
        ("task.started", {"run": run, "task": "w0", "attempt": HASHES}),
        claim(run, "a", "k12"),  # w0 runs now: posted alone, for what w0 may consume
        claim(run, "a", "k11", claim={"evidence": QUERY}),
    ]


def started(planner: Sender, coder: Sender, run: str) -> None:
    tasks = [
        task("a"),
        task("p", agent="planner"),
        task("w0"),
    ]
    assert planner.post("run.started", {"run": run, "tasks": tasks}).status_code == 202
    assert (
        coder.post("task.started", {"run": run, "task": "a", "attempt": HASHES}).status_code == 202
    )
    assert coder.post("claim.posted", dict(claim(run, "a", "old")[1])).status_code == 202


def stored(run: str) -> dict[str, Any]:
    claims = Claim.objects.filter(run__key=run).order_by("key")
    return {
        "claims": [
            (
                c.key,
                c.task.key,
                c.status,
                c.status_reason,
                c.load_bearing,
                c.verification_pending,
                c.about,
                c.posted_by,
            )
            for c in claims
        ],
        "evidence": sorted(
            (
                e.claim.key,
                e.role,
                e.kind,
                e.source,
                e.verdict,
                e.verdict_reason,
                e.submitted_by,
                e.task.key,
            )
            for e in Evidence.objects.filter(claim__run__key=run)
        ),
        "uses": sorted(
            (u.claim.key, u.task.key) for u in ClaimUse.objects.filter(claim__run__key=run)
        ),
    }


def same(body: dict[str, Any], run: str) -> dict[str, Any]:
    """A result as comparable across the two runs: without its event id and run key."""
    text = repr({k: v for k, v in body.items() if k != "event"})
    return {"body": text.replace(repr(run), "'RUN'")}


def test_a_batch_of_claims_gives_the_results_and_rows_of_posting_them_one_by_one(planner, coder):
    started(planner, coder, "one")
    started(planner, coder, "all")
    singles = [coder.post(type, data) for type, data in story("one")]
    response = post_batch(coder, [event(type, data) for type, data in story("all")])
    assert response.status_code == 200
    batched = response.json()["results"]
    assert [r["status"] for r in batched] == [s.status_code for s in singles]
    assert [same(r["body"], "all") for r in batched] == [same(s.json(), "one") for s in singles]
    assert stored("all") == stored("one")
    statuses = [r["status"] for r in batched]
    assert statuses == [202, 202, 202, 202, 409, 409, 202, 403, 422, 422, 403, 202, 202, 202, 202]


def statements(coder: Sender, count: int) -> int:
    events = [event(*claim("r1", "a", f"k{uuid.uuid4().hex}")) for _ in range(count)]
    with CaptureQueriesContext(connection) as queries:
        response = post_batch(coder, events)
    assert [r["status"] for r in response.json()["results"]] == [202] * count
    sql = [q["sql"] for q in queries.captured_queries]
    events = next(i for i, s in enumerate(sql) if s.startswith('INSERT INTO "fleet_event"'))
    return len(
        [s for s in sql[: events + 1] if not s.startswith(("SAVEPOINT", "RELEASE", "BEGIN"))]
    )


@pytest.mark.postgres
def test_a_stretch_of_claims_costs_the_same_few_statements_however_long(planner, coder):
    started(planner, coder, "r1")
    few, many = statements(coder, 5), statements(coder, 200)
    assert many == few, (few, many)
    assert many <= 8  # known events, tasks, taken keys, running tasks, claims, change, events
