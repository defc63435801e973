"""Who consumes a claim: the tasks below its producer unless they narrow `consumes`, not its
checkers; `load_bearing` is raised by consuming it and never lowered once consumed."""

import pytest

from runs.models import Claim, ClaimUse, Run, Task
from tests.fixtures.seed import ATTEMPT, INVENTED, PhoenixDX, at, seed_tasks

pytestmark = pytest.mark.django_db

RUN = "tier-discounts"
CLAIM = "plan.customer-tier"


def declare(seed: PhoenixDX, tasks: list[dict]) -> None:
    declared = seed.planner.post("run.started", {"run": RUN, "tasks": tasks}, timestamp=at(0))
    assert declared.status_code == 202, declared.json()


def plan_posts(seed: PhoenixDX, *, load_bearing: bool = True, finish: bool = True):
    seed.planner.post("task.started", {"run": RUN, "task": "plan", "attempt": ATTEMPT})
    claim = {"key": CLAIM, "statement": INVENTED, "load_bearing": load_bearing}
    posted = seed.planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": claim})
    assert posted.status_code == 202, posted.json()
    if finish:
        seed.planner.post("task.finished", {"run": RUN, "task": "plan", "outcome": "succeeded"})
    return posted


def start(sender, key: str, **data):
    return sender.post("task.started", {"run": RUN, "task": key, "attempt": ATTEMPT, **data})


def claim_errors(response) -> list[dict]:
    return [e for e in response.json()["errors"] if e["loc"] in ("blockers", f"claims.{CLAIM}")]


def test_a_consumer_that_does_not_list_the_claim_is_still_gated(client, seed):
    declare(seed, seed_tasks(coders_consume=False))
    plan_posts(seed)

    refused = start(seed.coder_a, "discount-resolver")

    assert refused.status_code == 409
    assert claim_errors(refused) == [
        {"loc": "blockers", "msg": f"claim:{CLAIM}"},
        {
            "loc": f"claims.{CLAIM}",
            "msg": f"{CLAIM} is unverified, and a task starts only on verified claims: "
            "posted without evidence",
        },
    ]
    frontier = seed.get(client, f"/api/v1/runs/{RUN}/frontier").json()
    assert frontier["ready"] == ["confirm-schema"]
    assert frontier["deferred"] == [
        {"task": "api-change", "blockers": [f"claim:{CLAIM}"]},
        {"task": "discount-resolver", "blockers": [f"claim:{CLAIM}"]},
    ]


def test_it_is_gated_through_the_tasks_between_it_and_the_producer(client, seed):
    declare(
        seed,
        [
            {"key": "plan", "agent": "planner"},
            {"key": "api-change", "agent": "coder-b", "prerequisites": ["plan"], "consumes": []},
            {"key": "api-tests", "agent": "coder-b", "prerequisites": ["api-change"]},
        ],
    )
    plan_posts(seed)
    assert start(seed.coder_b, "api-change").status_code == 202
    seed.coder_b.post("task.finished", {"run": RUN, "task": "api-change", "outcome": "succeeded"})

    refused = start(seed.coder_b, "api-tests")

    assert refused.status_code == 409
    assert {"loc": "blockers", "msg": f"claim:{CLAIM}"} in refused.json()["errors"]


def test_a_declared_consumes_replaces_the_claims_above_and_an_empty_one_is_recorded(client, seed):
    declare(
        seed,
        [
            {"key": "plan", "agent": "planner"},
            {"key": "notes", "agent": "coder-a", "prerequisites": ["plan"], "consumes": []},
            {"key": "api-change", "agent": "coder-b", "prerequisites": ["plan"]},
        ],
    )
    plan_posts(seed)

    assert start(seed.coder_a, "notes").status_code == 202
    assert not ClaimUse.objects.filter(task__key="notes").exists()
    tasks = {t["key"]: t for t in seed.get(client, f"/api/v1/runs/{RUN}").json()["tasks"]}
    assert (tasks["notes"]["consumes"], tasks["notes"]["consumes_declared"]) == ([], True)
    assert (tasks["api-change"]["consumes"], tasks["api-change"]["consumes_declared"]) == (
        [],
        False,
    )
    assert tasks["api-change"]["blockers"] == [f"claim:{CLAIM}"]


def test_checks_lets_the_checker_start_and_its_own_claims_are_gated_as_usual(client, seed):
    tasks = seed_tasks(coders_consume=False)
    tasks.append({"key": "api-tests", "agent": "coder-b", "prerequisites": ["confirm-schema"]})
    declare(seed, tasks)
    plan_posts(seed)

    assert start(seed.schema, "confirm-schema").status_code == 202
    checked = {"key": "schema.columns", "statement": "customers has four columns"}
    seed.schema.post("claim.posted", {"run": RUN, "task": "confirm-schema", "claim": checked})
    seed.schema.post(
        "task.finished", {"run": RUN, "task": "confirm-schema", "outcome": "succeeded"}
    )

    # Below the checker, both the claim it checked and its own claim still hold the work.
    refused = start(seed.coder_b, "api-tests")
    assert refused.status_code == 409
    assert {e["msg"] for e in refused.json()["errors"] if e["loc"] == "blockers"} == {
        f"claim:{CLAIM}",
        "claim:schema.columns",
    }


def test_checks_frees_only_the_claims_it_names(client, seed):
    declare(
        seed,
        [
            {"key": "plan", "agent": "planner"},
            {"key": "check", "agent": "schema", "prerequisites": ["plan"], "checks": [CLAIM]},
        ],
    )
    plan_posts(seed, finish=False)
    other = {"key": "plan.api", "statement": "the order API takes a tier"}
    seed.planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": other})
    seed.planner.post("task.finished", {"run": RUN, "task": "plan", "outcome": "succeeded"})

    refused = start(seed.schema, "check")

    assert refused.status_code == 409
    assert [e["msg"] for e in refused.json()["errors"] if e["loc"] == "blockers"] == [
        "claim:plan.api"
    ]


def test_a_claim_posted_as_not_load_bearing_that_a_task_below_consumes_is_raised(client, seed):
    declare(seed, seed_tasks(coders_consume=False))

    posted = plan_posts(seed, load_bearing=False)

    assert posted.json()["load_bearing"] is True
    assert posted.json()["raised"] == "consumed by api-change, discount-resolver"
    assert start(seed.coder_a, "discount-resolver").status_code == 409
    claim = seed.get(client, f"/api/v1/runs/{RUN}").json()["claims"][0]
    assert (claim["load_bearing"], claim["raised_by"]) == (
        True,
        "consumed by api-change, discount-resolver",
    )


def test_load_bearing_false_after_consumption_is_refused_naming_the_consumers(client, seed):
    declare(seed, seed_tasks(coders_consume=False))
    plan_posts(seed, finish=False)

    claim = {"key": CLAIM, "statement": INVENTED, "load_bearing": False}
    again = seed.planner.post("claim.posted", {"run": RUN, "task": "plan", "claim": claim})

    assert again.status_code == 409
    assert again.json()["errors"] == [
        {
            "loc": "data.claim.load_bearing",
            "msg": f"{CLAIM} is load-bearing and consumed by api-change, discount-resolver: "
            "load_bearing can be raised, never lowered once a task consumes it",
        }
    ]
    assert Claim.objects.get().load_bearing


def test_a_task_added_later_that_consumes_a_not_load_bearing_claim_raises_it(client, seed):
    declare(seed, [{"key": "plan", "agent": "planner"}])
    posted = plan_posts(seed, load_bearing=False, finish=False)
    assert "raised" not in posted.json()  # nothing consumes it yet

    added = {"key": "discount-resolver", "agent": "coder-a", "prerequisites": ["plan"]}
    assert seed.planner.post("tasks.added", {"run": RUN, "tasks": [added]}).status_code == 202
    seed.planner.post("task.finished", {"run": RUN, "task": "plan", "outcome": "succeeded"})

    claim = Claim.objects.get()
    assert (claim.load_bearing, claim.raised_by) == (True, "consumed by discount-resolver")
    assert start(seed.coder_a, "discount-resolver").status_code == 409


def test_naming_a_not_load_bearing_claim_on_task_started_gates_the_start(client, seed):
    declare(
        seed,
        [
            {"key": "plan", "agent": "planner"},
            {"key": "notes", "agent": "coder-a", "consumes": []},
        ],
    )
    plan_posts(seed, load_bearing=False)
    assert not Claim.objects.get().load_bearing

    refused = start(seed.coder_a, "notes", consumes=[CLAIM])

    assert refused.status_code == 409
    assert {"loc": "blockers", "msg": f"claim:{CLAIM}"} in refused.json()["errors"]


def test_a_resent_declaration_with_checks_and_an_empty_consumes_is_a_no_op(client, seed):
    tasks = seed_tasks(coders_consume=False)
    tasks[2]["consumes"] = []
    declare(seed, tasks)

    again = seed.planner.post("run.started", {"run": RUN, "tasks": list(reversed(tasks))})
    assert again.status_code == 202
    assert again.json()["created"] is False

    unchecked = [dict(t) for t in tasks]
    del unchecked[1]["checks"]
    assert seed.planner.post("run.started", {"run": RUN, "tasks": unchecked}).status_code == 409
    implicit = [dict(t) for t in tasks]
    del implicit[2]["consumes"]
    assert seed.planner.post("run.started", {"run": RUN, "tasks": implicit}).status_code == 409
    run = Run.objects.get()
    task = Task.objects.get(key="discount-resolver")
    assert (task.consumes, task.consumes_declared) == ([], True)
    assert Task.objects.get(key="confirm-schema").checks == [CLAIM]
    assert run.declaration
