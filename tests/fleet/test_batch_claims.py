"""A batch's claim.posted and task.finished events are looked up together and written in bulk,
with the very results and rows that applying them one by one gives."""

import uuid
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.models import Artifact, Attempt, Claim, ClaimUse, Evidence, Task
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


def finish(
    run: str, task_key: str, outcome: str = "succeeded", **fields: Any
) -> tuple[str, dict[str, Any]]:
    return "task.finished", {"run": run, "task": task_key, "outcome": outcome, **fields}


def story(run: str) -> list[tuple[str, dict[str, Any]]]:
    """Every way a claim or a finish in a stretch can go: the common ones, and each that is
    applied alone."""
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
        finish(run, "w0", artifacts=[{"kind": "commit", "ref": "abc123"}]),
        claim(run, "a", "k13"),  # w0 finished: a's claims are common again
        finish(run, "w0"),  # finished already
        finish(run, "w1"),  # never started
        finish(run, "p"),  # the planner's
        finish(run, "a"),
        claim(run, "a", "k14"),  # on a finished task
        claim(run, "a", "k20"),  # used by d (below a) and e (names it), not f (checks it)
        claim(run, "w0", "k21"),  # d is not below w0, e does not name it: no use
        ("task.started", {"run": run, "task": "w1", "attempt": HASHES}),
        ("task.started", {"run": run, "task": "w2", "attempt": HASHES}),
        finish(run, "w1", "failed", failure={"kind": "transient", "signature": "timeout"}),
        finish(run, "w2", background_killed=[{"task": "w1"}]),
        finish(run, "nope"),
    ]


def started(planner: Sender, coder: Sender, run: str) -> None:
    tasks = [
        task("a"),
        task("p", agent="planner"),
        task("w0"),
        task("w1"),
        task("w2"),
        task("d", prerequisites=["a"]),  # consumes a's claims implicitly
        task("e", consumes=["k20"]),
        task("f", consumes=["k20"], checks=["k20"]),  # checks it: no use
    ]
    assert planner.post("run.started", {"run": run, "tasks": tasks}).status_code == 202
    assert (
        coder.post("task.started", {"run": run, "task": "a", "attempt": HASHES}).status_code == 202
    )
    assert coder.post("claim.posted", dict(claim(run, "a", "old")[1])).status_code == 202
    # Running already (as after a producer's retry, or a claim posted late): they consume what
    # the batch posts from its first moment.
    Task.objects.filter(run__key=run, key__in=["d", "e", "f"]).update(state=Task.State.RUNNING)


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
        "tasks": sorted(
            (t.key, t.state, t.ready, t.finished_at is not None)
            for t in Task.objects.filter(run__key=run)
        ),
        "attempts": sorted(
            (
                a.task.key,
                a.number,
                a.outcome,
                a.failure_kind,
                a.background_killed,
                a.resumable,
                a.finished_at is not None,
            )
            for a in Attempt.objects.filter(task__run__key=run)
        ),
        "artifacts": sorted(
            (a.task.key, a.kind, a.ref) for a in Artifact.objects.filter(task__run__key=run)
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
    assert {("k20", "d"), ("k20", "e")} <= set(stored("all")["uses"])
    assert stored("all") == stored("one")
    statuses = [r["status"] for r in batched]
    assert statuses == [
        *[202, 202, 202, 202, 409, 409, 202, 403, 422, 422, 403, 202, 202, 202, 202],
        *[202, 202, 409, 409, 403, 202, 202, 202, 202, 202, 202, 202, 202, 422],
    ]


def statements(coder: Sender, events: list[dict[str, Any]]) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = post_batch(coder, events)
    assert [r["status"] for r in response.json()["results"]] == [202] * len(events)
    sql = [q["sql"] for q in queries.captured_queries]
    last = next(i for i, s in enumerate(sql) if s.startswith('COPY "fleet_event"'))
    return len([s for s in sql[: last + 1] if not s.startswith(("SAVEPOINT", "RELEASE", "BEGIN"))])


def claims(count: int) -> list[dict[str, Any]]:
    return [event(*claim("r1", "a", f"k{uuid.uuid4().hex}")) for _ in range(count)]


@pytest.mark.postgres
def test_a_stretch_of_claims_costs_the_same_few_statements_however_long(planner, coder):
    started(planner, coder, "r1")
    few, many = statements(coder, claims(5)), statements(coder, claims(200))
    assert many == few, (few, many)
    # known events, tasks, taken keys, running tasks, the claims' keys and rows, their uses, the
    # events' keys and rows
    assert many <= 10


def test_a_stretch_of_claims_alone_reads_no_attempts(planner, coder):
    started(planner, coder, "r1")
    with CaptureQueriesContext(connection) as queries:
        response = post_batch(coder, claims(20))
    assert [r["status"] for r in response.json()["results"]] == [202] * 20
    assert not [q["sql"] for q in queries.captured_queries if '"runs_attempt"' in q["sql"]]


@pytest.mark.postgres
def test_tasks_finishing_with_their_claims_cost_the_same_few_statements_however_many(
    planner, coder
):
    keys = [f"t{i}" for i in range(60)]
    assert (
        planner.post("run.started", {"run": "r1", "tasks": [task(k) for k in keys]}).status_code
        == 202
    )
    for key in keys:
        assert (
            coder.post("task.started", {"run": "r1", "task": key, "attempt": HASHES}).status_code
            == 202
        )

    def work(some: list[str]) -> list[dict[str, Any]]:
        return [
            e
            for key in some
            for e in (event(*claim("r1", key, f"c-{key}")), event(*finish("r1", key)))
        ]

    few, many = statements(coder, work(keys[:5])), statements(coder, work(keys[5:]))
    assert many == few, (few, many)
    assert many <= 13  # and the tasks' lock and second read, the attempts' and the tasks' updates


def test_a_claim_an_orchestrator_sends_for_an_agent_records_it_in_a_batch_as_alone(planner, coder):
    """Who sent it is kept beside whom it is for, batched or not: a check the orchestrator
    sends later is its own claim's check (circular), never a verification."""
    for run in ("one", "all"):
        started(planner, coder, run)
    for_coder = [claim(run, "a", "kk", agent="coder", claim={"evidence": QUERY})[1]
                 for run in ("one", "all")]  # fmt: skip
    assert planner.post("claim.posted", for_coder[0]).status_code == 202
    batched = post_batch(planner, [event("claim.posted", for_coder[1])]).json()["results"]
    assert [r["status"] for r in batched] == [202]
    for run in ("one", "all"):
        posted = Claim.objects.get(run__key=run, key="kk")
        assert (posted.posted_by, posted.sent_by) == ("agent:coder", "agent:planner")
        [evidence] = posted.evidence.all()
        assert (evidence.submitted_by, evidence.sent_by) == ("agent:coder", "agent:planner")
