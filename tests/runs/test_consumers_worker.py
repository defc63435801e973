"""Consumers and halts on PostgreSQL with a real worker: a consumer that does not name the claim
is gated, `load_bearing` is not lowered once consumed, a checker starts, and a running consumer
is halted over HTTP and releases nothing until the claim is settled."""

import pytest

from runs.claims.by_hand import check_by_hand
from runs.models import Claim, Halt, Task
from tests.conftest import Receiver, eventually
from tests.escalations.desk import member
from tests.fixtures.seed import ATTEMPT, INVENTED, phoenixdx

pytestmark = [pytest.mark.postgres, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

RUN = "tier-discounts"
CLAIM = "plan.customer-tier"
TASKS = [
    {"key": "plan", "agent": "planner"},
    {"key": "confirm-schema", "agent": "schema", "prerequisites": ["plan"], "checks": [CLAIM]},
    {"key": "discount-resolver", "agent": "coder-a", "prerequisites": ["plan"]},
    {
        "key": "api-tests",
        "agent": "coder-b",
        "prerequisites": ["discount-resolver"],
        "consumes": [],
    },
]


def start(sender, key: str):
    return sender.post("task.started", {"run": RUN, "task": key, "attempt": ATTEMPT})


def finish(sender, key: str):
    return sender.post("task.finished", {"run": RUN, "task": key, "outcome": "succeeded"})


def blocked(key: str, code: str) -> bool:
    return Task.objects.get(key=key).blockers.filter(code=code, cleared_at=None).exists()


def test_consumers_are_gated_halted_and_held_by_the_worker(
    worker, client, hooked, receiver: Receiver
):
    seed = phoenixdx(client, hooked)
    assert seed.planner.post("run.started", {"run": RUN, "tasks": TASKS}).status_code == 202
    assert start(seed.planner, "plan").status_code == 202
    claim = {"key": CLAIM, "statement": INVENTED, "load_bearing": False}
    posted = seed.planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": claim})
    assert posted.json()["raised"] == "consumed by discount-resolver"
    lowered = seed.planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": claim})
    assert lowered.status_code == 409
    assert lowered.json()["errors"][0]["loc"] == "data.claim.load_bearing"
    assert finish(seed.planner, "plan").status_code == 202

    # The coder names no consumes and is gated; the checker starts on the unverified claim.
    eventually(lambda: blocked("discount-resolver", f"claim:{CLAIM}"))
    assert start(seed.coder_a, "discount-resolver").status_code == 409
    eventually(lambda: Task.objects.get(key="confirm-schema").ready)
    assert start(seed.schema, "confirm-schema").status_code == 202

    alice = member("alice", hooked)
    row = Claim.objects.select_related("run").get(key=CLAIM)
    check_by_hand(claim=row, reviewer=alice, verdict="verified", note="the DBA says so")
    eventually(lambda: Task.objects.get(key="discount-resolver").ready)
    assert start(seed.coder_a, "discount-resolver").status_code == 202

    row.refresh_from_db()
    check_by_hand(claim=row, reviewer=alice, verdict="refuted", note="no such column")
    halted = eventually(lambda: receiver.of_type("task.halted"))
    assert [(r.body["data"]["task"], r.signed) for r in halted] == [("discount-resolver", True)]

    assert finish(seed.coder_a, "discount-resolver").status_code == 202
    eventually(lambda: blocked("api-tests", f"claim:{CLAIM}"))
    assert start(seed.coder_b, "api-tests").status_code == 409

    row.refresh_from_db()
    check_by_hand(claim=row, reviewer=alice, verdict="verified", note="migration 0042 applied")
    eventually(lambda: Task.objects.get(key="api-tests").ready)
    assert Halt.objects.get().settled_at is not None
    assert start(seed.coder_b, "api-tests").status_code == 202
