"""A claim refuted under running consumers: each gets a signed task.halted with the ground truth,
and its finish releases nothing until the claim is settled again."""

from datetime import UTC, datetime

import pytest

from runs.claims.by_hand import check_by_hand, supersede_refuted
from runs.models import Claim, Halt, Task
from tests.conftest import Receiver, committed
from tests.escalations.desk import member
from tests.fixtures.seed import ATTEMPT, INVENTED, PhoenixDX, at

pytestmark = pytest.mark.django_db

RUN = "tier-discounts"
CLAIM = "plan.customer-tier"
TASKS = [
    {"key": "plan", "agent": "planner"},
    {"key": "confirm-schema", "agent": "schema", "prerequisites": ["plan"], "checks": [CLAIM]},
    # Builds on the plan's claims without naming them.
    {"key": "discount-resolver", "agent": "coder-a", "prerequisites": ["plan"]},
    # Narrowed to nothing: only the halt can hold it.
    {
        "key": "api-tests",
        "agent": "coder-b",
        "prerequisites": ["discount-resolver"],
        "consumes": [],
    },
    {"key": "api-change", "agent": "coder-b", "prerequisites": ["plan"], "consumes": []},
]


def start(sender, key: str, **data):
    return sender.post("task.started", {"run": RUN, "task": key, "attempt": ATTEMPT, **data})


def finish(sender, key: str):
    return sender.post("task.finished", {"run": RUN, "task": key, "outcome": "succeeded"})


def by_hand(verdict: str, note: str) -> Claim:
    reviewer = member("alice", Claim.objects.get(key=CLAIM).run.fleet)
    claim = Claim.objects.select_related("run").get(key=CLAIM)
    return committed(check_by_hand, claim=claim, reviewer=reviewer, verdict=verdict, note=note)


def running_on_a_verified_claim(seed: PhoenixDX) -> None:
    """The plan's claim, verified by a reviewer, and the work that started on it."""
    assert seed.planner.post("run.started", {"run": RUN, "tasks": TASKS}).status_code == 202
    start(seed.planner, "plan")
    claim = {"key": CLAIM, "statement": INVENTED}
    seed.planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": claim})
    finish(seed.planner, "plan")
    by_hand("verified", "the DBA says the column is there")
    for sender, key in (
        (seed.coder_a, "discount-resolver"),
        (seed.schema, "confirm-schema"),
        (seed.coder_b, "api-change"),
    ):
        assert start(sender, key).status_code == 202, key


def test_a_running_consumer_gets_a_signed_task_halted_with_the_ground_truth(
    client, seed, hooked, receiver: Receiver
):
    running_on_a_verified_claim(seed)

    by_hand("refuted", "information_schema has no customer_tier on customers")

    [halted] = receiver.of_type("task.halted")
    assert halted.signed
    data = halted.body["data"]
    assert {k: data[k] for k in ("run", "task", "agent", "attempt", "claim", "statement")} == {
        "run": RUN,
        "task": "discount-resolver",
        "agent": "coder-a",
        "attempt": 1,
        "claim": CLAIM,
        "statement": INVENTED,
    }
    assert data["reason"] == (
        f"{CLAIM} was refuted while discount-resolver was running on it: refuted by hand by "
        "alice: information_schema has no customer_tier on customers. Stop building on it: "
        "until it is verified again or a reviewer's answer replaces it, what discount-resolver "
        f"produces releases nothing (its dependants wait with claim:{CLAIM})."
    )
    [truth] = data["ground_truth"]
    assert (truth["kind"], truth["source"], truth["payload"]["verdict"]) == (
        "human_answer",
        "reviewer:alice",
        "refuted",
    )
    # The checker, the producer and a task that narrowed its consumes were not running on it.
    assert list(Halt.objects.values_list("task__key", flat=True)) == ["discount-resolver"]


def test_its_finish_releases_nothing_until_the_claim_is_verified_again(client, seed, hooked):
    running_on_a_verified_claim(seed)
    by_hand("refuted", "information_schema has no customer_tier on customers")

    assert finish(seed.coder_a, "discount-resolver").status_code == 202
    assert Task.objects.get(key="discount-resolver").state == "succeeded"
    refused = start(seed.coder_b, "api-tests")

    assert refused.status_code == 409
    assert {"loc": "blockers", "msg": f"claim:{CLAIM}"} in refused.json()["errors"]
    assert {
        "loc": f"claims.{CLAIM}",
        "msg": f"{CLAIM} is refuted: refuted by hand by alice: information_schema has no "
        "customer_tier on customers; discount-resolver was running on it when it was refuted, "
        f"so what it produced releases nothing until {CLAIM} is verified again or a reviewer's "
        "answer replaces it",
    } in refused.json()["errors"]
    body = seed.get(client, f"/api/v1/runs/{RUN}").json()
    tasks = {t["key"]: t for t in body["tasks"]}
    assert tasks["api-tests"]["blockers"] == [f"claim:{CLAIM}"]
    [halt] = tasks["discount-resolver"]["halted"]
    assert (halt["claim"], halt["attempt"], halt["settled_at"]) == (CLAIM, 1, None)

    by_hand("verified", "the column was added by migration 0042 after all")

    assert Halt.objects.get().settled_at is not None
    assert Task.objects.get(key="api-tests").ready
    assert start(seed.coder_b, "api-tests").status_code == 202


def test_declaring_checks_does_not_let_a_task_build_on_a_halted_tasks_output(client, seed, hooked):
    """A careless orchestrator added a task below the halted one that 'checks' the refuted
    claim: the checks exemption let it start on what the halted task produced."""
    running_on_a_verified_claim(seed)
    by_hand("refuted", "information_schema has no customer_tier on customers")
    finish(seed.coder_a, "discount-resolver")
    sneak = {"key": "sneak", "agent": "coder-b", "prerequisites": ["discount-resolver"],
             "checks": [CLAIM]}  # fmt: skip
    assert seed.planner.post("tasks.added", {"run": RUN, "tasks": [sneak]}).status_code == 202

    refused = start(seed.coder_b, "sneak")

    assert refused.status_code == 409
    assert {"loc": "blockers", "msg": f"claim:{CLAIM}"} in refused.json()["errors"]
    by_hand("verified", "the column was added by migration 0042 after all")
    assert start(seed.coder_b, "sneak").status_code == 202


def test_a_reviewers_answer_that_takes_the_claims_key_settles_the_halt(client, seed, hooked):
    running_on_a_verified_claim(seed)
    by_hand("refuted", "information_schema has no customer_tier on customers")
    finish(seed.coder_a, "discount-resolver")

    plan = Task.objects.get(key="plan")
    committed(
        supersede_refuted,
        task=plan,
        statement="Use the loyalty_points threshold in pricing-config.yaml",
        evidence={"source": "reviewer:alice", "payload_hash": "sha256:" + "0" * 64},
        at=datetime.now(UTC),
    )

    assert Claim.objects.get(key=CLAIM).status == "verified"
    assert Claim.objects.get(key=f"{CLAIM}@refuted-1").superseded
    assert Halt.objects.get().settled_at is not None
    assert start(seed.coder_b, "api-tests").status_code == 202


def test_a_task_that_named_the_claim_when_it_started_is_halted_too(client, seed, hooked, receiver):
    assert seed.planner.post("run.started", {"run": RUN, "tasks": TASKS}).status_code == 202
    start(seed.planner, "plan")
    claim = {"key": CLAIM, "statement": INVENTED}
    seed.planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": claim})
    finish(seed.planner, "plan")
    by_hand("verified", "the DBA says the column is there")
    assert start(seed.coder_b, "api-change", consumes=[CLAIM]).status_code == 202

    by_hand("refuted", "information_schema has no customer_tier on customers")

    assert [r.body["data"]["task"] for r in receiver.of_type("task.halted")] == ["api-change"]


def test_a_pending_consumer_is_held_by_the_claim_not_halted(client, seed, hooked, receiver):
    assert seed.planner.post("run.started", {"run": RUN, "tasks": TASKS}, timestamp=at(0))
    start(seed.planner, "plan")
    claim = {"key": CLAIM, "statement": INVENTED}
    seed.planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": claim})

    by_hand("refuted", "information_schema has no customer_tier on customers")

    assert receiver.of_type("task.halted") == []
    assert not Halt.objects.exists()
