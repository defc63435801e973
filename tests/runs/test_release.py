"""What a change releases: the work downstream that the frontier now lets go."""

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runs.frontier import ClaimView, TaskNode, World, frontier
from runs.release import region, released_by
from tests.runs.test_frontier import Nodes, runs, worlds


def test_released_by_counts_only_the_tasks_the_answer_makes_ready():
    nodes = {
        "plan": TaskNode("plan"),  # answered: pending again
        "check": TaskNode("check", state="succeeded", prerequisites=("plan",)),
        # The answer replaced the refuted claim `c`: the resolver may start.
        "resolver": TaskNode("resolver", prerequisites=("check",), consumes=("c",)),
        "tests": TaskNode("tests", prerequisites=("resolver",), consumes=("c",)),  # waits on it
        "push": TaskNode("push", prerequisites=("check",), capabilities=("forge",)),  # forge down
        "direct": TaskNode("direct", prerequisites=("plan",)),  # waits for plan to run again
        "stuck": TaskNode("stuck", prerequisites=("check",), consumes=("unchecked",)),
        "elsewhere": TaskNode("elsewhere"),  # ready, but not the answer's doing
    }
    world = World(
        down=frozenset({"forge"}),
        claims={"c": ClaimView("verified", True), "unchecked": ClaimView("unverified", True)},
    )
    assert released_by(nodes, world, "plan") == ["plan", "resolver"]
    # An answered task that is itself blocked is not released either.
    blocked = {**nodes, "plan": TaskNode("plan", capabilities=("forge",))}
    assert released_by(blocked, world, "plan") == ["resolver"]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), worlds(policy="scoped"), st.sets(st.sampled_from([f"t{i}" for i in range(12)])))
def test_the_frontier_of_a_region_is_the_runs_own_for_its_tasks(
    nodes: Nodes, world: World, around: set[str]
) -> None:
    found = region(nodes, around)
    alone = {key: nodes[key] for key in found}
    named = {c for key in found for c in (*nodes[key].consumes, *nodes[key].halted_on)}
    seen = replace(
        world,
        claims={c: v for c, v in world.claims.items() if v.producer in found or c in named},
        escalations={k: v for k, v in world.escalations.items() if k in found},
    )

    whole, part = frontier(nodes, world), frontier(alone, seen)

    assert set(part.ready) == set(whole.ready) & found
    assert part.deferred == {k: v for k, v in whole.deferred.items() if k in found}
    for key in around & nodes.keys():
        assert released_by(alone, seen, key) == released_by(nodes, world, key)


def test_a_region_holds_what_is_below_and_what_decides_it():
    nodes = {
        "up": TaskNode("up"),
        "a": TaskNode("a", prerequisites=("up",)),
        "b": TaskNode("b", prerequisites=("a",)),
        "peer": TaskNode("peer", transaction="g", prerequisites=("far",)),
        "far": TaskNode("far"),
        "c": TaskNode("c", prerequisites=("a",), transaction="g"),
        "beside": TaskNode("beside", prerequisites=("up",)),  # shares an ancestor only
        "under-peer": TaskNode("under-peer", prerequisites=("peer",)),
    }
    assert region(nodes, ["a"]) == {"up", "a", "b", "c", "peer", "far"}
