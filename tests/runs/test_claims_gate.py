"""The gate: a task that builds on a load-bearing claim starts only once the claim is verified."""

import pytest

from fleet import services
from runs.claims.hashing import payload_hash
from runs.models import Claim, ClaimUse, Evidence, Run
from tests.fixtures.orders import REAL_COLUMNS, OrdersDatabase
from tests.fixtures.orders import orders_database as orders_database  # noqa: F401
from tests.fixtures.orders import orders_postgresql as orders_postgresql  # noqa: F401
from tests.fixtures.orders import orders_postgresql_session as orders_postgresql_session  # noqa: F401
from tests.fixtures.seed import ATTEMPT, INVENTED, REAL, PhoenixDX, at, seed_tasks

pytestmark = pytest.mark.django_db

RUN = "tier-discounts"


def plan_posts(
    seed: PhoenixDX,
    evidence: dict | None = None,
    *,
    coders_consume: bool = True,
    statement: str = INVENTED,
):
    """The planner declares the run, posts its customer_tier claim and finishes the plan."""
    planner = seed.planner
    assert (
        planner.post(
            "run.started",
            {"run": RUN, "tasks": seed_tasks(coders_consume=coders_consume)},
            received=at(0),
        ).status_code
        == 202
    )
    assert (
        planner.post(
            "task.started", {"run": RUN, "task": "plan", "attempt": ATTEMPT}, received=at(0)
        ).status_code
        == 202
    )
    claim = {"key": "plan.customer-tier", "statement": statement, "load_bearing": True}
    if evidence is not None:
        claim["evidence"] = evidence
    posted = planner.post(
        "claim.posted", {"run": RUN, "task": "plan", "claim": claim}, received=at(1)
    )
    assert posted.status_code == 202, posted.json()
    assert (
        planner.post(
            "task.finished", {"run": RUN, "task": "plan", "outcome": "succeeded"}, received=at(1.5)
        ).status_code
        == 202
    )
    return posted


def start(sender, key: str, **data):
    return sender.post(
        "task.started", {"run": RUN, "task": key, "attempt": ATTEMPT, **data}, received=at(2)
    )


def test_the_invented_column_posted_without_evidence_is_unverified_and_blocks_the_coders(
    client, seed
):
    posted = plan_posts(seed)
    assert posted.json()["status"] == "unverified"
    assert posted.json()["reason"] == "posted without evidence"

    frontier = seed.get(client, f"/api/v1/runs/{RUN}/frontier").json()
    assert frontier["ready"] == ["confirm-schema"]
    assert frontier["deferred"] == [
        {"task": "api-change", "blockers": ["claim:plan.customer-tier"]},
        {"task": "discount-resolver", "blockers": ["claim:plan.customer-tier"]},
    ]
    refused = start(seed.coder_a, "discount-resolver")
    assert refused.status_code == 409
    assert {"loc": "blockers", "msg": "claim:plan.customer-tier"} in refused.json()["errors"]
    assert {
        "loc": "claims.plan.customer-tier",
        "msg": "plan.customer-tier is unverified, and a task starts only on verified claims: "
        "posted without evidence",
    } in refused.json()["errors"]
    assert start(seed.coder_b, "api-change").status_code == 409

    claim = seed.get(client, f"/api/v1/runs/{RUN}").json()["claims"][0]
    assert claim["key"] == "plan.customer-tier"
    assert (claim["status"], claim["reason"]) == ("unverified", "posted without evidence")
    assert not Claim.objects.get().verification_pending
    # The schema agent, whose job is to check it, may start: it does not build on the claim.
    assert start(seed.schema, "confirm-schema").status_code == 202


def test_the_plan_itself_is_not_evidence(client, seed):
    """The all-green run's schema agent "confirmed" the column from the planner's own plan."""
    text = {"path": "plan.md", "lines": [3, 3], "text": INVENTED}
    evidence = {"kind": "file_read", "source": "agent:planner", "payload_hash": payload_hash(text)}
    posted = plan_posts(seed, evidence)

    assert posted.json()["reason"] == "another agent's text is not evidence"
    claim = Claim.objects.get()
    assert claim.status == "unverified" and not claim.verification_pending
    row = Evidence.objects.get(claim=claim)
    assert (row.role, row.verdict) == ("posted", "unverified")
    assert start(seed.coder_a, "discount-resolver").status_code == 409


def test_a_claim_not_posted_yet_blocks_what_builds_on_it(client, seed):
    seed.planner.post("run.started", {"run": RUN, "tasks": seed_tasks()}, received=at(0))
    seed.planner.post("task.started", {"run": RUN, "task": "plan", "attempt": ATTEMPT})
    seed.planner.post("task.finished", {"run": RUN, "task": "plan", "outcome": "succeeded"})

    refused = start(seed.coder_a, "discount-resolver")
    assert refused.status_code == 409
    assert {"loc": "blockers", "msg": "claim:plan.customer-tier"} in refused.json()["errors"]
    assert {
        "loc": "claims.plan.customer-tier",
        "msg": f"plan.customer-tier has not been posted in run {RUN!r}",
    } in refused.json()["errors"]
    # A consumption named only when starting is gated the same way.
    refused = start(seed.schema, "confirm-schema", consumes=["plan.tier-source"])
    assert refused.status_code == 409
    assert {"loc": "blockers", "msg": "claim:plan.tier-source"} in refused.json()["errors"]


def test_a_claim_posted_as_not_load_bearing_that_a_task_consumes_is_raised_and_gates_it(
    client, seed
):
    seed.planner.post("run.started", {"run": RUN, "tasks": seed_tasks()}, received=at(0))
    seed.planner.post("task.started", {"run": RUN, "task": "plan", "attempt": ATTEMPT})
    claim = {"key": "plan.customer-tier", "statement": INVENTED, "load_bearing": False}
    posted = seed.planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": claim})
    seed.planner.post("task.finished", {"run": RUN, "task": "plan", "outcome": "succeeded"})

    assert posted.json()["load_bearing"] is True
    assert posted.json()["raised"] == "consumed by api-change, discount-resolver"
    assert start(seed.coder_a, "discount-resolver").status_code == 409
    assert not ClaimUse.objects.filter(task__key="discount-resolver").exists()


def test_a_claim_nothing_consumes_stays_not_load_bearing_and_informs_work_without_gating_it(
    client, seed
):
    tasks = [
        {"key": "plan", "agent": "planner"},
        {"key": "notes", "agent": "coder-a", "prerequisites": ["plan"], "consumes": []},
    ]
    seed.planner.post("run.started", {"run": RUN, "tasks": tasks}, received=at(0))
    seed.planner.post("task.started", {"run": RUN, "task": "plan", "attempt": ATTEMPT})
    claim = {"key": "plan.customer-tier", "statement": INVENTED, "load_bearing": False}
    posted = seed.planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": claim})
    seed.planner.post("task.finished", {"run": RUN, "task": "plan", "outcome": "succeeded"})

    assert "raised" not in posted.json()
    assert not Claim.objects.get().load_bearing
    assert start(seed.coder_a, "notes").status_code == 202
    assert not ClaimUse.objects.filter(task__key="notes").exists()


def test_verified_evidence_releases_the_coders(client, seed, orders_database: OrdersDatabase):
    services.source_add(
        fleet=seed.fleet, kind="datasource", name="orders", value=orders_database.dsn
    )
    posted = plan_posts(seed, orders_database.columns_evidence(REAL_COLUMNS), statement=REAL)
    assert posted.json()["reason"] == "waiting for a verifier"

    claim = Claim.objects.get()
    assert (claim.status, claim.checked_by) == ("verified", "verifier")
    frontier = seed.get(client, f"/api/v1/runs/{RUN}/frontier").json()
    assert frontier["ready"] == ["api-change", "confirm-schema", "discount-resolver"]
    assert start(seed.coder_a, "discount-resolver").status_code == 202
    assert ClaimUse.objects.get().task.key == "discount-resolver"


# Refusals, each named ------------------------------------------------------------------------


def check(seed: PhoenixDX, evidence: dict, **data):
    body = {
        "run": RUN,
        "task": "confirm-schema",
        "claim": "plan.customer-tier",
        "verdict": "refuted",
    }
    return seed.schema.post("claim.checked", {**body, "evidence": evidence, **data}, received=at(3))


@pytest.mark.parametrize(
    "source", ["agent:planner", "Agent :planner", "agent\uff1aplanner", "\u200bagent:planner"]
)
def test_a_check_citing_another_agents_text_is_refused_with_422_saying_why(client, seed, source):
    plan_posts(seed)
    evidence = {"kind": "file_read", "source": source, "payload_hash": payload_hash({})}

    refused = check(seed, evidence, verdict="verified")

    assert refused.status_code == 422
    assert refused.json()["errors"] == [
        {
            "loc": "data.evidence.source",
            "msg": "another agent's text is not evidence: cite a query, a file, a test run or an HTTP exchange",
        }
    ]
    assert not Evidence.objects.filter(role="check").exists()
    assert Claim.objects.get().status == "unverified"


def test_a_check_of_an_unknown_claim_or_task_is_refused_naming_the_field(client, seed):
    plan_posts(seed)
    evidence = {"kind": "query_result", "source": "SELECT 1", "payload_hash": payload_hash({})}

    unknown_claim = check(seed, evidence, claim="plan.nothing")
    assert unknown_claim.status_code == 422
    assert unknown_claim.json()["errors"] == [
        {"loc": "data.claim", "msg": f"unknown claim 'plan.nothing' in run '{RUN}'"}
    ]
    unknown_task = check(seed, evidence, task="nowhere")
    assert unknown_task.status_code == 422
    assert unknown_task.json()["errors"][0]["loc"] == "data.task"


def test_a_check_from_a_task_that_neither_consumes_nor_checks_the_claim_is_refused(client, seed):
    """An unrelated task's verdict refuted a verified claim: its consumers were halted and its
    producer reframed on the word of a task with no part in it. Only a consumer (declared, or
    below the producer) or a declared checker checks a claim."""
    plan_posts(seed)
    seed.planner.post(
        "tasks.added",
        {"run": RUN, "tasks": [{"key": "docs", "agent": "coder-a", "consumes": []}]},
        received=at(2),
    )
    evidence = {"kind": "query_result", "source": "SELECT 1", "payload_hash": payload_hash({})}
    body = {"run": RUN, "task": "docs", "claim": "plan.customer-tier", "verdict": "refuted"}

    refused = seed.coder_a.post("claim.checked", {**body, "evidence": evidence}, received=at(3))

    assert refused.status_code == 422
    assert refused.json()["errors"] == [
        {
            "loc": "data.task",
            "msg": "task 'docs' neither consumes nor checks claim 'plan.customer-tier': a claim "
            "is checked by a task that builds on it, or one declared to check it (`checks` in "
            "its spec)",
        }
    ]
    assert not Evidence.objects.filter(role="check").exists()
    # Its consumer and its declared checker may.
    by_consumer = {**body, "task": "discount-resolver", "evidence": evidence}
    assert seed.coder_a.post("claim.checked", by_consumer, received=at(3)).status_code == 202
    assert check(seed, evidence).status_code == 202


@pytest.mark.parametrize(
    ("evidence", "loc"),
    [
        (
            {"kind": "query_result", "source": "SELECT 1", "payload_hash": "9f3a...e1"},
            "data.evidence.payload_hash",
        ),
        (
            {"kind": "hunch", "source": "SELECT 1", "payload_hash": payload_hash({})},
            "data.evidence.kind",
        ),
        ({"kind": "query_result", "payload_hash": payload_hash({})}, "data.evidence.source"),
    ],
)
def test_malformed_evidence_is_refused_naming_the_field(client, seed, evidence, loc):
    plan_posts(seed)
    refused = check(seed, evidence)
    assert refused.status_code == 422
    assert loc in [e["loc"] for e in refused.json()["errors"]]


def test_a_claim_posted_twice_or_by_an_unknown_task_is_refused(client, seed):
    plan_posts(seed)
    claim = {"key": "plan.customer-tier", "statement": "again"}

    again = seed.planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": claim})
    assert again.status_code == 409
    assert again.json()["errors"] == [
        {"loc": "data.claim.key", "msg": "claim 'plan.customer-tier' was already posted"}
    ]
    # Another task posting the key, whatever else it says, is told whose claim the key is.
    for load_bearing in (True, False):
        theirs = {"key": "plan.customer-tier", "statement": "mine", "load_bearing": load_bearing}
        other = seed.schema.post(
            "claim.posted", {"run": RUN, "task": "confirm-schema", "claim": theirs}
        )
        assert other.status_code == 409
        assert other.json()["errors"] == [
            {"loc": "data.claim.key",
             "msg": "claim 'plan.customer-tier' was already posted by task 'plan'"}
        ]  # fmt: skip
    claim = {"key": "plan.other", "statement": "x"}
    nowhere = seed.planner.post("claim.posted", {"run": RUN, "task": "nowhere", "claim": claim})
    assert nowhere.status_code == 422
    assert nowhere.json()["errors"][0]["loc"] == "data.task"
    assert Run.objects.get().claims.count() == 1
