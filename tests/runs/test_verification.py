"""Claims checked against reality: the verifier's verdicts, consumers' checks, the loud failure."""

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from fleet import services
from runs import retries
from runs.claims import verification
from runs.claims.by_hand import check_by_hand
from runs.claims.hashing import (
    canonical_json,
    http_exchange_payload,
    payload_hash,
    query_result_payload,
)
from runs.claims.hashing import test_run_payload as run_payload
from runs.claims.verifiers import verify
from runs.models import Claim, ClaimUse, Decision, Evidence, Task
from tests.conftest import eventually
from tests.fixtures.orders import (
    INVENTED_COLUMNS,
    REAL_COLUMNS,
    OrdersDatabase,
    columns_payload,
)
from tests.fixtures.orders import orders_database as orders_database  # noqa: F401
from tests.fixtures.orders import orders_postgresql as orders_postgresql  # noqa: F401
from tests.fixtures.orders import orders_postgresql_session as orders_postgresql_session  # noqa: F401
from tests.fixtures.seed import ATTEMPT, INVENTED, REAL, PhoenixDX, at, seed_tasks

pytestmark = pytest.mark.django_db

RUN = "tier-discounts"


@dataclass
class Handover:
    claim: str
    reality: list[dict[str, Any]]
    decision: Any


@pytest.fixture
def handed_over(monkeypatch) -> list[Handover]:
    """Every call to the retry policy's `claim_refuted`, which still runs as it is built."""
    calls: list[Handover] = []
    real = retries.claim_refuted

    def spy(*, claim: Claim, reality: list[dict[str, Any]]) -> Any:
        decision = real(claim=claim, reality=reality)
        calls.append(Handover(claim.key, reality, decision))
        return decision

    monkeypatch.setattr(retries, "claim_refuted", spy)
    return calls


@pytest.fixture
def orders(seed: PhoenixDX, orders_database: OrdersDatabase) -> OrdersDatabase:
    services.source_add(
        fleet=seed.fleet, kind="datasource", name="orders", value=orders_database.dsn
    )
    return orders_database


def plan_posts(seed: PhoenixDX, evidence: dict | None = None, statement: str = INVENTED) -> Claim:
    """The replay: the planner posts the invented column and finishes; the schema agent starts."""
    planner = seed.planner
    planner.post("run.started", {"run": RUN, "tasks": seed_tasks()}, received=at(0))
    planner.post("task.started", {"run": RUN, "task": "plan", "attempt": ATTEMPT}, received=at(0))
    planner.post(
        "task.finished", {"run": RUN, "task": "plan", "outcome": "succeeded"}, received=at(1)
    )
    started = seed.schema.post(
        "task.started",
        {"run": RUN, "task": "confirm-schema", "attempt": ATTEMPT},
        received=at(1.5),
    )
    assert started.status_code == 202, started.json()
    # Posted once the schema agent is at work: a refutation reframes the planner.
    claim: dict[str, Any] = {"key": "plan.customer-tier", "statement": statement}
    if evidence is not None:
        claim["evidence"] = evidence
    posted = planner.post(
        "claim.posted", {"run": RUN, "task": "plan", "claim": claim}, received=at(1)
    )
    assert posted.status_code == 202, posted.json()
    return Claim.objects.get(key="plan.customer-tier")


def schema_checks(seed: PhoenixDX, verdict: str, evidence: dict, claim: str = "plan.customer-tier"):
    response = seed.schema.post(
        "claim.checked",
        {
            "run": RUN,
            "task": "confirm-schema",
            "claim": claim,
            "verdict": verdict,
            "evidence": evidence,
        },
        received=at(3),
    )
    assert response.status_code == 202, response.json()
    assert response.json()["verdict"] == "pending verification"
    return Claim.objects.get(key=claim)


def start(sender, key: str):
    return sender.post(
        "task.started", {"run": RUN, "task": key, "attempt": ATTEMPT}, received=at(4)
    )


def claim_row(client, seed: PhoenixDX, key: str = "plan.customer-tier") -> dict[str, Any]:
    claims = seed.get(client, f"/api/v1/runs/{RUN}").json()["claims"]
    return next(c for c in claims if c["key"] == key)


# A claim's own evidence -----------------------------------------------------------------------


def test_evidence_that_matches_reality_verifies_the_claim(seed, orders, handed_over):
    claim = plan_posts(seed, orders.columns_evidence(REAL_COLUMNS), REAL)

    assert (claim.status, claim.checked_by) == ("verified", "verifier")
    assert claim.status_reason.startswith("verified by the verifier: re-ran the query")
    assert claim.checked_at is not None and not claim.verification_pending
    row = Evidence.objects.get(claim=claim)
    assert (row.role, row.verdict) == ("posted", "verified")
    assert not Evidence.objects.filter(role="reality").exists()
    assert handed_over == []


def test_evidence_with_the_invented_column_is_refuted_and_reality_kept(
    client, seed, orders, handed_over
):
    claim = plan_posts(seed, orders.columns_evidence(INVENTED_COLUMNS))

    assert (claim.status, claim.checked_by) == ("refuted", "verifier")
    assert "reality differs from the payload hash" in claim.status_reason
    reality = Evidence.objects.get(claim=claim, role="reality")
    assert reality.payload == columns_payload(REAL_COLUMNS)
    assert reality.payload_hash == payload_hash(columns_payload(REAL_COLUMNS))
    assert (reality.submitted_by, reality.verdict) == ("verifier", "refuted")
    # The loud failure: the producing task goes to the retry policy with the real columns.
    assert [h.claim for h in handed_over] == ["plan.customer-tier"]
    assert handed_over[0].reality[0]["payload"] == columns_payload(REAL_COLUMNS)
    assert start(seed.coder_a, "discount-resolver").status_code == 409
    assert claim_row(client, seed)["status"] == "refuted"


def test_evidence_no_verifier_can_reach_stays_unverified_with_the_reason(client, seed, orders):
    evidence = orders.columns_evidence(REAL_COLUMNS, datasource="billing")

    claim = plan_posts(seed, evidence)

    assert claim.status == "unverified" and not claim.verification_pending
    reason = "no verifier could check its evidence: no data source named 'billing' is registered"
    assert claim.status_reason.startswith(reason)
    assert claim_row(client, seed)["reason"].startswith(reason)
    assert start(seed.coder_a, "discount-resolver").status_code == 409


# A consumer's check: the seed's replay --------------------------------------------------------


def test_the_schema_agents_check_refutes_the_invented_column(client, seed, orders, handed_over):
    plan_posts(seed)

    claim = schema_checks(seed, "refuted", orders.columns_evidence(REAL_COLUMNS))

    assert (claim.status, claim.checked_by) == ("refuted", "agent:schema")
    assert claim.checked_at.isoformat() == "2026-06-02T09:03:00+00:00"
    assert claim.status_reason.startswith(
        "refuted by agent:schema's check, whose evidence the verifier confirmed"
    )
    check = Evidence.objects.get(claim=claim, role="check")
    assert check.verdict == "refuted" and check.verdict_reason.startswith("accepted: ")
    assert Evidence.objects.get(claim=claim, role="reality").payload == columns_payload(
        REAL_COLUMNS
    )
    assert [h.reality[0]["payload"] for h in handed_over] == [columns_payload(REAL_COLUMNS)]
    assert handed_over[0].reality[0]["checked_by"] == "agent:schema"
    # No coder ever starts on the bad plan.
    assert start(seed.coder_a, "discount-resolver").status_code == 409
    assert start(seed.coder_b, "api-change").status_code == 409
    frontier = seed.get(client, f"/api/v1/runs/{RUN}/frontier").json()
    assert {
        "task": "api-change",
        "blockers": ["claim:plan.customer-tier", "prerequisite:plan"],
    } in frontier["deferred"]


@pytest.mark.postgres
def test_the_information_schema_query_refutes_it_on_postgresql(
    client, seed, orders_postgresql, handed_over
):
    services.source_add(
        fleet=seed.fleet, kind="datasource", name="orders", value=orders_postgresql.dsn
    )
    plan_posts(seed)

    evidence = orders_postgresql.columns_evidence(REAL_COLUMNS)
    assert "information_schema.columns" in evidence["source"]
    claim = schema_checks(seed, "refuted", evidence)

    assert claim.status == "refuted"
    assert handed_over[0].reality[0]["payload"]["rows"] == [[c] for c in REAL_COLUMNS]
    assert start(seed.coder_a, "discount-resolver").status_code == 409
    # The planner is reframed with the real columns, as PostgreSQL's information_schema has them.
    decision = Decision.objects.get(pk=handed_over[0].decision.pk)
    assert (decision.task.key, decision.action) == ("plan", "reframe")
    context = seed.get(client, f"/api/v1/runs/{RUN}/tasks/plan/context").json()
    assert context["decision"] == "reframe"
    assert any(t.get("payload") == columns_payload(REAL_COLUMNS) for t in context["ground_truth"])


def test_the_replay_with_containment_reaches_1_agent_in_2_minutes(client, seed, orders):
    plan_posts(seed)
    schema_checks(seed, "refuted", orders.columns_evidence(REAL_COLUMNS))

    assert claim_row(client, seed)["blast_radius"] == {
        "agents": 1,
        "artifacts": 0,
        "minutes": 2.0,
        "tasks": ["confirm-schema"],
    }
    # The checker read the claim from when its task started.
    use = ClaimUse.objects.get()
    assert (use.task.key, use.at.isoformat()) == ("confirm-schema", "2026-06-02T09:01:30+00:00")


def test_a_check_from_a_task_that_never_started_is_no_use_of_the_claim(client, seed, orders):
    plan_posts(seed)
    response = seed.coder_a.post(
        "claim.checked",
        {
            "run": RUN,
            "task": "discount-resolver",  # not started: its agent checks before starting it
            "claim": "plan.customer-tier",
            "verdict": "refuted",
            "evidence": orders.columns_evidence(REAL_COLUMNS),
        },
        received=at(3),
    )
    assert response.status_code == 202, response.json()
    assert Task.objects.get(key="discount-resolver").started_at is None
    assert not ClaimUse.objects.filter(task__key="discount-resolver").exists()
    assert claim_row(client, seed)["blast_radius"]["tasks"] == []


def test_the_planner_is_reframed_with_the_real_columns(client, seed, orders, handed_over):
    plan_posts(seed)
    schema_checks(seed, "refuted", orders.columns_evidence(REAL_COLUMNS))

    assert len(handed_over) == 1
    assert handed_over[0].decision is not None, "the refutation decided nothing for the planner"
    decision = Decision.objects.get(pk=handed_over[0].decision.pk)
    assert (decision.task.key, decision.action) == ("plan", "reframe")
    assert any(
        truth.get("payload") == columns_payload(REAL_COLUMNS) for truth in decision.ground_truth
    ), decision.ground_truth
    context = seed.get(client, f"/api/v1/runs/{RUN}/tasks/plan/context").json()
    assert context["decision"] == "reframe"
    assert any(t.get("payload") == columns_payload(REAL_COLUMNS) for t in context["ground_truth"])


def test_a_check_whose_evidence_differs_from_reality_is_recorded_not_accepted(
    client, seed, orders, handed_over
):
    """The all-green schema agent, this time citing a query: its hash includes the invented column."""
    plan_posts(seed)

    claim = schema_checks(seed, "verified", orders.columns_evidence(INVENTED_COLUMNS))

    assert claim.status == "unverified" and not claim.verification_pending
    check = Evidence.objects.get(claim=claim, role="check")
    assert check.verdict == "verified"
    assert check.verdict_reason.startswith("not accepted: its evidence does not match reality")
    reason = claim_row(client, seed)["reason"]
    assert reason.startswith(
        "still unverified: agent:schema's verified verdict was not accepted: its evidence does not "
        "match reality"
    )
    assert handed_over == []
    assert start(seed.coder_a, "discount-resolver").status_code == 409


def test_a_refutation_citing_the_claims_own_evidence_is_not_accepted(seed, orders, handed_over):
    evidence = orders.columns_evidence(REAL_COLUMNS)
    plan_posts(seed, evidence, REAL)

    claim = schema_checks(seed, "refuted", evidence)

    assert claim.status == "verified"
    check = Evidence.objects.get(claim=claim, role="check")
    assert "a refutation does not follow" in check.verdict_reason
    assert handed_over == []


def test_a_consumers_verified_does_not_overturn_a_refutation(seed, orders):
    plan_posts(seed, orders.columns_evidence(INVENTED_COLUMNS))
    count = query_result_payload(columns=["n"], rows=[[3]])
    evidence = {
        "kind": "query_result",
        "source": "SELECT count(*) AS n FROM customers",
        "payload_hash": payload_hash(count),
        "datasource": "orders",
    }

    claim = schema_checks(seed, "verified", evidence)

    assert claim.status == "refuted"
    check = Evidence.objects.get(claim=claim, role="check")
    assert "does not overturn a refutation" in check.verdict_reason


def test_a_confirmed_refutation_from_another_source_overturns_a_verified_claim(
    seed, orders, handed_over
):
    gold = query_result_payload(columns=["n"], rows=[[1]])
    evidence = {
        "kind": "query_result",
        "source": "SELECT count(*) AS n FROM customers WHERE loyalty_points > 1000",
        "payload_hash": payload_hash(gold),
        "datasource": "orders",
    }
    statement = "some `customers` have over 1000 `loyalty_points`: a gold tier"
    assert plan_posts(seed, evidence, statement).status == "verified"
    none = query_result_payload(columns=["n"], rows=[[0]])
    zero_tiers = {
        "kind": "query_result",
        "source": "SELECT count(*) AS n FROM customers WHERE loyalty_points > 100000",
        "payload_hash": payload_hash(none),
        "datasource": "orders",
    }

    claim = schema_checks(seed, "refuted", zero_tiers)

    assert (claim.status, claim.checked_by) == ("refuted", "agent:schema")
    assert [h.claim for h in handed_over] == ["plan.customer-tier"]


def test_a_confirmed_verified_check_releases_the_consumer(client, seed, orders):
    planner = seed.planner
    tasks = [
        {"key": "plan", "agent": "planner"},
        {"key": "confirm-schema", "agent": "schema", "prerequisites": ["plan"]},
        {
            "key": "points",
            "agent": "coder-a",
            "prerequisites": ["plan"],
            "consumes": ["plan.points"],
        },
    ]
    planner.post("run.started", {"run": RUN, "tasks": tasks}, received=at(0))
    planner.post("task.started", {"run": RUN, "task": "plan", "attempt": ATTEMPT})
    claim = {"key": "plan.points", "statement": "`customers` has a `loyalty_points` column"}
    planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": claim}, received=at(1))
    planner.post("task.finished", {"run": RUN, "task": "plan", "outcome": "succeeded"})
    assert start(seed.coder_a, "points").status_code == 409

    checked = schema_checks(
        seed, "verified", orders.columns_evidence(REAL_COLUMNS), claim="plan.points"
    )

    assert (checked.status, checked.checked_by) == ("verified", "agent:schema")
    assert Task.objects.get(key="points").ready
    assert start(seed.coder_a, "points").status_code == 202


def test_a_check_no_verifier_can_reach_is_not_accepted_and_says_why(client, seed, orders):
    plan_posts(seed)

    claim = schema_checks(
        seed, "refuted", orders.columns_evidence(REAL_COLUMNS, datasource="billing")
    )

    assert claim.status == "unverified"
    assert "could not re-check its evidence: no data source named 'billing'" in claim.status_reason


# Idempotence ----------------------------------------------------------------------------------


def test_verifying_again_records_nothing_twice(seed, orders, handed_over):
    claim = plan_posts(seed, orders.columns_evidence(INVENTED_COLUMNS))

    verification.verify_claim(claim.pk)  # the task delivered twice
    Claim.objects.filter(pk=claim.pk).update(verification_pending=True)  # or re-enqueued
    verification.verify_claim(claim.pk)

    assert Evidence.objects.filter(role="reality").count() == 1
    assert len(handed_over) == 1
    claim.refresh_from_db()
    assert claim.status == "refuted" and not claim.verification_pending


def test_two_workers_racing_record_one_verdict(seed, orders, handed_over, monkeypatch):
    # Post without running the verifier, then let two "workers" judge the same evidence.
    monkeypatch.setattr("runs.scheduler.verify_after_commit", lambda claim: None)
    claim = plan_posts(seed, orders.columns_evidence(INVENTED_COLUMNS))
    assert claim.verification_pending
    rows = list(verification.unjudged(claim.pk))
    sources = verification.sources_for(seed.fleet.pk)
    first = {row.pk: verify(verification.as_evidence(row), sources) for row in rows}
    second = {row.pk: verify(verification.as_evidence(row), sources) for row in rows}

    verification.record(claim.pk, first)
    verification.record(claim.pk, second)

    assert Evidence.objects.filter(role="reality").count() == 1
    assert len(handed_over) == 1
    assert Claim.objects.get(pk=claim.pk).status == "refuted"


def test_a_claim_being_re_checked_is_not_re_checked_again_alongside(
    seed, orders, handed_over, monkeypatch
):
    """The reconciler re-enqueues every pending claim; a second copy of a slow re-check (a test
    command) run alongside in the same workspace could refute what the first one verifies."""
    monkeypatch.setattr("runs.scheduler.verify_after_commit", lambda claim: None)
    claim = plan_posts(seed, orders.columns_evidence(REAL_COLUMNS), REAL)
    real = verification.verify
    running: list[int] = []
    alongside: list[bool] = []  # per re-check: whether another one was running at the time

    def slow(evidence: dict, sources: Any, *, limits: Any) -> Any:
        alongside.append(bool(running))
        running.append(1)
        try:
            if len(alongside) == 1:
                verification.verify_claim(claim.pk)  # the reconciler's copy, while this one runs
                schema_checks(seed, "verified", orders.columns_evidence(REAL_COLUMNS))
            return real(evidence, sources, limits=limits)
        finally:
            running.pop()

    monkeypatch.setattr(verification, "verify", slow)
    verification.verify_claim(claim.pk)

    # Never two at once: the claim's own evidence, then the check that arrived meanwhile.
    assert alongside == [False, False]
    claim.refresh_from_db()
    assert claim.status == "verified" and not claim.verification_pending
    assert not Evidence.objects.filter(claim=claim, role="check", verdict_reason="").exists()


def test_a_re_check_that_outlasts_the_workers_limit_leaves_the_claim_unverified_saying_so(
    seed, orders, handed_over, monkeypatch
):
    from celery.exceptions import SoftTimeLimitExceeded

    monkeypatch.setattr("runs.scheduler.verify_after_commit", lambda claim: None)
    claim = plan_posts(seed, orders.columns_evidence(REAL_COLUMNS), REAL)

    def trickling(evidence: dict, sources: Any, *, limits: Any) -> Any:
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(verification, "verify", trickling)
    verification.verify_claim(claim.pk)

    claim.refresh_from_db()
    assert claim.status == "unverified" and not claim.verification_pending
    assert "took longer than the worker's limit" in claim.status_reason


def test_a_claim_that_is_gone_is_not_verified(db):
    verification.verify_claim(987654)
    assert verification.record(987654, {}) is None


# By hand --------------------------------------------------------------------------------------


def test_a_reviewer_refutes_by_hand_and_the_planner_is_handed_over(seed, alice, handed_over):
    claim = plan_posts(seed)

    check_by_hand(claim=claim, reviewer=alice, verdict="refuted", note="customers has no tier")

    claim.refresh_from_db()
    assert (claim.status, claim.checked_by) == ("refuted", "reviewer:alice")
    answer = Evidence.objects.get(claim=claim)
    assert (answer.kind, answer.source, answer.verdict) == (
        "human_answer",
        "reviewer:alice",
        "refuted",
    )
    assert handed_over[0].reality[0]["kind"] == "human_answer"
    assert start(seed.coder_a, "discount-resolver").status_code == 409


def test_a_consumers_check_does_not_overturn_a_reviewer(seed, orders, alice, handed_over):
    claim = plan_posts(seed)
    check_by_hand(claim=claim, reviewer=alice, verdict="verified", note="tier comes from points")

    claim = schema_checks(seed, "refuted", orders.columns_evidence(REAL_COLUMNS))

    assert (claim.status, claim.checked_by) == ("verified", "reviewer:alice")
    check = Evidence.objects.get(claim=claim, role="check", kind="query_result")
    assert "reviewer:alice already verified the claim by hand" in check.verdict_reason
    assert handed_over == []


def test_a_reviewers_verdict_is_verified_or_refuted(seed, alice):
    claim = plan_posts(seed)
    with pytest.raises(ValueError, match="verified or refuted, not 'maybe'"):
        check_by_hand(claim=claim, reviewer=alice, verdict="maybe", note="")
    assert not Evidence.objects.exists()


@pytest.mark.parametrize(
    ("action", "status", "handovers"),
    [("refute_by_hand", "refuted", 1), ("verify_by_hand", "verified", 0)],
)
def test_the_admin_checks_a_claim_by_hand(client, seed, handed_over, action, status, handovers):
    claim = plan_posts(seed)
    get_user_model().objects.create_superuser("root", password="pw")
    client.login(username="root", password="pw")

    response = client.post("/admin/runs/claim/", {"action": action, "_selected_action": [claim.pk]})

    assert response.status_code == 302
    claim.refresh_from_db()
    assert (claim.status, claim.checked_by) == (status, "reviewer:root")
    assert Evidence.objects.get(claim=claim).kind == "human_answer"
    assert len(handed_over) == handovers


# With the real worker -------------------------------------------------------------------------


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_verifies_a_posted_claim_after_commit_and_releases_the_consumer(
    worker, client, seed, orders
):
    def ready(key: str) -> bool:
        return Task.objects.get(key=key).ready

    # As an agent does: start a task once it is reported ready (the frontier is the worker's).
    planner = seed.planner
    assert planner.post("run.started", {"run": RUN, "tasks": seed_tasks()}).status_code == 202
    eventually(lambda: ready("plan"))
    assert start(planner, "plan").status_code == 202
    evidence = orders.columns_evidence(REAL_COLUMNS)
    claim = {"key": "plan.customer-tier", "statement": REAL, "evidence": evidence}
    posted = planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": claim})
    assert posted.json()["reason"] == "waiting for a verifier"
    finished = {"run": RUN, "task": "plan", "outcome": "succeeded"}
    assert planner.post("task.finished", finished).status_code == 202
    eventually(lambda: ready("confirm-schema"))

    claim = Claim.objects.get()
    eventually(lambda: Claim.objects.get(pk=claim.pk).status == "verified")
    eventually(lambda: Task.objects.get(key="discount-resolver").ready)
    frontier = seed.get(client, f"/api/v1/runs/{RUN}/frontier").json()
    assert "discount-resolver" in frontier["ready"]
    assert start(seed.coder_a, "discount-resolver").status_code == 202


class Hits(BaseHTTPRequestHandler):
    count = 0

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        type(self).count += 1
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    do_POST = do_HEAD = do_GET


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    Hits.count = 0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Hits)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_dangerous_evidence_is_refused_with_a_reason_and_nothing_runs(
    worker, client, seed, orders, server, tmp_path: Path
):
    port = server.server_address[1]
    repo = tmp_path / "repo"
    repo.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("the database password\n")
    (repo / "leak.txt").symlink_to(secret)
    pwned = tmp_path / "pwned"
    services.source_add(fleet=seed.fleet, kind="workspace", name="repo", value=str(repo))
    services.source_add(fleet=seed.fleet, kind="host", name="forge", value=f"127.0.0.1:{port}")
    services.source_add(fleet=seed.fleet, kind="command", name="tests", value="pytest -q")
    ran = run_payload(command=f"touch {pwned}", exit_code=0, output_sha256="0" * 64)
    posted = http_exchange_payload(
        method="POST", url=f"http://127.0.0.1:{port}/orders", status=201, body_sha256="0" * 64
    )
    other = http_exchange_payload(
        method="GET", url=f"http://localhost:{port}/", status=200, body_sha256="0" * 64
    )
    text = {"path": "x", "lines": [1, 1], "text": "root:x:0:0"}
    dangerous = {
        "drop": ("query_result", "DROP TABLE customers", {}, "only runs queries that read"),
        "second": ("query_result", "SELECT 1; DROP TABLE customers", {}, "2 statements"),
        "passwd": ("file_read", "../../etc/passwd:1-1", text, "climbs out with '..'"),
        "link": ("file_read", "leak.txt:1-1", text, "is a link that leaves workspace 'repo'"),
        "post": ("http_exchange", posted["request"]["url"], posted, "only GET and HEAD"),
        "host": ("http_exchange", other["request"]["url"], other, "is not an allowed host"),
        "command": (
            "test_run",
            f"touch {pwned}",
            ran,
            "not one of the fleet's allowed test commands",
        ),
    }
    seed.planner.post("run.started", {"run": RUN, "tasks": seed_tasks()}, received=at(0))
    eventually(lambda: Task.objects.get(key="plan").ready)
    assert start(seed.planner, "plan").status_code == 202
    for key, (kind, source, payload, _) in dangerous.items():
        evidence = {
            "kind": kind,
            "source": source,
            "payload_hash": payload_hash(payload),
            "payload": payload,
        }
        evidence |= {"datasource": "orders"} if kind == "query_result" else {}
        claim = {"key": key, "statement": f"dangerous `{key}`", "evidence": evidence}
        response = seed.planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": claim})
        assert response.status_code == 202, response.json()

    eventually(lambda: not Claim.objects.filter(verification_pending=True).exists())

    for claim in Claim.objects.all():
        assert claim.status == "unverified", (claim.key, claim.status_reason)
        assert dangerous[claim.key][3] in claim.status_reason, (claim.key, claim.status_reason)
        assert claim.status_reason.startswith("no verifier could check its evidence")
    assert orders.customers() == 3
    assert not pwned.exists()
    assert Hits.count == 0
    assert secret.read_text() == "the database password\n"


# The README's worked example ------------------------------------------------------------------


def test_the_readmes_worked_example_is_what_the_code_computes():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme[readme.index("## Evidence and its hash") :]
    blocks = re.findall(r"```json\n(.*?)\n```", section, re.DOTALL)
    canonical, envelope = blocks[0], json.loads(blocks[1])
    stated = re.search(
        r"<!-- readme-example-hash -->\nso its hash is `(sha256:[0-9a-f]{64})`", section
    )

    assert canonical.encode() == canonical_json(columns_payload(REAL_COLUMNS))
    assert stated is not None and stated[1] == payload_hash(columns_payload(REAL_COLUMNS))
    evidence = envelope["data"]["evidence"]
    assert evidence["payload_hash"] == stated[1] == payload_hash(evidence["payload"])
    assert re.search(r"```sql\n(.*?)\n```", section, re.DOTALL)[1] == evidence["source"]  # type: ignore[index]
