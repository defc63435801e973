"""The frontier rule on claims: implicit consumers, `consumes` that narrows, `checks`, halts."""

from runs.frontier import (
    ClaimView,
    TaskNode,
    World,
    build_index,
    frontier,
    recompute,
    touched_by_claim,
)
from tests.runs.test_frontier import run, stored

UNVERIFIED = ClaimView("unverified", load_bearing=True, producer="plan")


def blockers(nodes: dict[str, TaskNode], world: World, key: str) -> tuple[str, ...]:
    return frontier(nodes, world).deferred.get(key, ())


def seed(**coder: object) -> dict[str, TaskNode]:
    """The plan (done, its claim posted), and a coder below it."""
    return run(
        TaskNode("plan", state="succeeded"),
        TaskNode("coder", prerequisites=("plan",), **coder),  # type: ignore[arg-type]
    )


def test_a_task_that_names_no_consumes_is_held_by_the_claims_of_the_tasks_above_it() -> None:
    world = World(claims={"plan.tier": UNVERIFIED})
    assert blockers(seed(implicit=True), world, "coder") == ("claim:plan.tier",)


def test_it_is_held_through_tasks_that_narrowed_their_own_consumes() -> None:
    nodes = run(
        TaskNode("plan", state="succeeded"),
        TaskNode("schema", state="succeeded", prerequisites=("plan",)),  # consumes: []
        TaskNode("tests", prerequisites=("schema",), implicit=True),
    )
    world = World(claims={"plan.tier": UNVERIFIED})
    assert blockers(nodes, world, "tests") == ("claim:plan.tier",)


def test_a_declared_consumes_replaces_the_claims_above_it() -> None:
    world = World(
        claims={
            "plan.tier": UNVERIFIED,
            "plan.note": ClaimView("unverified", load_bearing=True, producer="plan"),
        }
    )
    assert blockers(seed(consumes=("plan.note",)), world, "coder") == ("claim:plan.note",)
    assert blockers(seed(), world, "coder") == ()  # consumes: [] declared: nothing


def test_verified_claims_above_hold_nothing() -> None:
    world = World(claims={"plan.tier": ClaimView("verified", True, producer="plan")})
    assert blockers(seed(implicit=True), world, "coder") == ()


def test_a_refuted_claim_above_holds_even_when_it_is_not_load_bearing() -> None:
    world = World(claims={"plan.tier": ClaimView("refuted", False, producer="plan")})
    assert blockers(seed(implicit=True), world, "coder") == ("claim:plan.tier",)


def test_a_claim_a_reviewers_answer_superseded_holds_nothing_implicitly() -> None:
    world = World(claims={"plan.tier@refuted-1": ClaimView("refuted", True, producer=None)})
    assert blockers(seed(implicit=True), world, "coder") == ()


def test_a_task_does_not_consume_its_own_claims_nor_those_of_tasks_below_it() -> None:
    nodes = run(
        TaskNode("plan", implicit=True),
        TaskNode("coder", prerequisites=("plan",), state="succeeded"),
    )
    world = World(
        claims={
            "coder.pr": ClaimView("unverified", True, producer="coder"),
            "plan.tier": UNVERIFIED,
        }
    )
    assert blockers(nodes, world, "plan") == ()


def test_a_checker_may_start_on_the_claim_it_checks_but_not_on_others() -> None:
    world = World(
        claims={
            "plan.tier": UNVERIFIED,
            "plan.api": ClaimView("unverified", load_bearing=True, producer="plan"),
        }
    )
    checker = seed(implicit=True, checks=("plan.tier",))
    assert blockers(checker, world, "coder") == ("claim:plan.api",)
    named = seed(consumes=("plan.tier",), checks=("plan.tier",))
    assert blockers(named, world, "coder") == ()


def test_the_checkers_dependants_are_still_held_by_the_claim_it_checks() -> None:
    nodes = run(
        TaskNode("plan", state="succeeded"),
        TaskNode("schema", state="succeeded", prerequisites=("plan",), checks=("plan.tier",)),
        TaskNode("coder", prerequisites=("schema",), implicit=True),
    )
    world = World(claims={"plan.tier": UNVERIFIED})
    assert blockers(nodes, world, "coder") == ("claim:plan.tier",)


def test_a_halted_task_releases_nothing_until_the_claim_is_verified_again() -> None:
    nodes = run(
        TaskNode("coder", state="succeeded", halted_on=("plan.tier",)),
        TaskNode("deploy", prerequisites=("coder",)),  # consumes: [] declared: no way around it
    )
    refuted = World(claims={"plan.tier": ClaimView("refuted", True, producer=None)})
    assert frontier(nodes, refuted).deferred == {"deploy": ("claim:plan.tier",)}
    verified = World(claims={"plan.tier": ClaimView("verified", True, producer="plan")})
    assert frontier(nodes, verified).ready == ("deploy",)


def test_a_halted_task_run_again_waits_for_the_claim_too() -> None:
    nodes = run(TaskNode("coder", halted_on=("plan.tier",)))
    world = World(claims={"plan.tier": ClaimView("refuted", True, producer="plan")})
    assert blockers(nodes, world, "coder") == ("claim:plan.tier",)


def test_recompute_after_a_claim_reaches_every_task_below_its_producer() -> None:
    nodes = run(
        TaskNode("plan", state="succeeded"),
        TaskNode("a", prerequisites=("plan",), implicit=True),
        TaskNode("b", prerequisites=("a",), implicit=True),
        TaskNode("c", prerequisites=("a",), consumes=()),
        TaskNode("elsewhere", consumes=("plan.tier",)),
    )
    before = World()
    previous = stored(frontier(nodes, before))
    posted = World(claims={"plan.tier": UNVERIFIED})
    changed = touched_by_claim(nodes, posted, "plan.tier")
    assert changed == {"plan", "elsewhere"}
    updates = recompute(nodes, posted, previous=previous, changed=changed)
    # `elsewhere` waited for it already (not posted); `c` narrowed its consumes to nothing.
    assert updates == {"a": ("claim:plan.tier",), "b": ("claim:plan.tier", "prerequisite:a")}


class Reads(dict):
    """The run's tasks, counting each look-up of one."""

    reads = 0

    def __getitem__(self, key):
        self.reads += 1
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.reads += 1
        return super().get(key, default)


def test_a_claim_at_the_top_of_a_chain_ten_thousand_deep_costs_one_pass() -> None:
    depth = 10_000
    nodes = {
        f"t{i}": TaskNode(f"t{i}", prerequisites=(f"t{i - 1}",) if i else (), implicit=True)
        for i in range(depth)
    }
    nodes["t0"] = TaskNode("t0", state="succeeded")
    clear = World()
    held = World(claims={"t0.claim": ClaimView("unverified", True, producer="t0")})
    index = build_index(nodes)
    previous = stored(frontier(nodes, clear))

    counted = Reads(nodes)
    baseline = recompute(counted, clear, previous=previous, changed=["t0"], index=index)
    plain, counted.reads = counted.reads, 0
    updates = recompute(counted, held, previous=previous, changed=["t0"], index=index)
    with_claim = counted.reads

    assert baseline == {}
    assert len(updates) == depth - 1
    assert updates["t9999"] == ("claim:t0.claim", "prerequisite:t9998")
    # One walk down from the producer: the same order of work as the recompute itself (counted
    # in look-ups of the tasks, not in time: a walk per task would read them depth times over).
    assert plain >= depth and with_claim <= 2 * plain, (with_claim, plain)
