"""What a change releases: the work downstream that the frontier now lets go."""

from runs.frontier import ClaimView, TaskNode, World
from runs.release import released_by


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
