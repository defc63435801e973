"""The frontier: which pending tasks may start now, and the typed blockers of the rest. Pure.

`frontier` evaluates a whole run; `recompute` re-evaluates only what one change can reach (the
descendants of the changed tasks, closed over transaction groups), so that a capability coming
back costs time in proportion to the work it touches, not to the size of the run.

Claims: a task consumes the claims it names in `consumes`, or, naming none, every claim posted by
the tasks above it; the claims it `checks` never hold it; a task halted on a refuted claim holds
its dependants (and itself) until the claim is verified again (`runs.frontier_blockers`).

Everything here is iterative (no recursion), so a 10,000-deep chain is fine, and the result does
not depend on the order of the mappings it is given.

This module is the rule's public face: the data lives in `runs.frontier_types`, the blockers in
`runs.frontier_blockers` and the incremental recompute in `runs.frontier_recompute`.
"""

from collections.abc import Mapping

from runs.frontier_blockers import evaluate, halt_blockers
from runs.frontier_recompute import (
    build_index,
    dependants,
    recompute,
    touched_by_capability,
    touched_by_claim,
)
from runs.frontier_types import (
    CLAIM_STATUSES,
    CONFIDENCES,
    EFFECTS,
    POLICIES,
    PREREQUISITE,
    ROLES,
    STOPPED,
    TASK_STATES,
    TRANSACTION,
    UNFINISHED,
    ClaimView,
    Frontier,
    GraphIndex,
    TaskNode,
    World,
)

__all__ = [
    "CLAIM_STATUSES",
    "CONFIDENCES",
    "EFFECTS",
    "POLICIES",
    "PREREQUISITE",
    "ROLES",
    "STOPPED",
    "TASK_STATES",
    "TRANSACTION",
    "UNFINISHED",
    "ClaimView",
    "Frontier",
    "GraphIndex",
    "TaskNode",
    "World",
    "build_index",
    "dependants",
    "frontier",
    "recompute",
    "touched_by_capability",
    "touched_by_claim",
]


def frontier(nodes: Mapping[str, TaskNode], world: World) -> Frontier:
    """The safe ready frontier of a run and the typed blockers of every other pending task."""
    halt = halt_blockers(nodes, world, None)
    evaluated = evaluate(nodes, world, nodes.keys(), halt=halt, previous=None)
    return Frontier(
        policy=world.policy,
        ready=tuple(sorted(key for key, blockers in evaluated.items() if not blockers)),
        deferred={key: evaluated[key] for key in sorted(evaluated) if evaluated[key]},
    )
