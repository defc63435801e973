"""What a change releases: the work downstream of a task, and which of it the frontier now lets go."""

from collections.abc import Iterable, Mapping

from runs.frontier import UNFINISHED, TaskNode, World, dependants, frontier

__all__ = ["UNFINISHED", "downstream", "region", "released_by"]


def downstream(nodes: dict[str, TaskNode], key: str) -> list[str]:
    """Every task that depends on `key`, directly or not (breadth first)."""
    reverse = dependants(nodes)
    seen: dict[str, None] = {}
    queue = list(reverse.get(key, ()))
    while queue:
        current = queue.pop(0)
        if current in seen or current == key:
            continue
        seen[current] = None
        queue.extend(reverse.get(current, ()))
    return list(seen)


def released_by(
    nodes: dict[str, TaskNode], world: World, key: str, *, ready: Iterable[str] | None = None
) -> list[str]:
    """What an answer releases: the tasks it makes ready, the answered task first.

    `nodes` and `world` as they are once the answer is in (the task pending again, its hold
    lifted, its refuted claims replaced by the answer). A task counts only if it is in the safe
    ready frontier: the answered task, and pending work downstream of it that nothing holds any
    more. Work that still waits on a prerequisite (even one the answer releases), or is blocked
    for another reason (a capability down, an unverified claim), is not released.
    """
    ready = set(frontier(nodes, world).ready if ready is None else ready)
    below = sorted(k for k in downstream(nodes, key) if k in ready)
    return ([key] if key in ready else []) + below


def region(nodes: Mapping[str, TaskNode], keys: Iterable[str]) -> set[str]:
    """The tasks that decide the frontier of `keys` and of everything below them: those tasks,
    and, closed over both, every task they depend on and every member of their transaction
    groups. The frontier computed on the region alone is the run's own for each of its tasks,
    unless a global halt holds (it looks at every unfinished task of the run); the claims it
    needs are those its tasks post, name in `consumes` or are halted on.

    `scheduler.facts_for(..., around=)` reads just these on PostgreSQL: an answer no longer
    reads the whole run to say what it releases."""
    reverse = dependants(nodes)
    found = {key for key in keys if key in nodes}
    stack = list(found)
    while stack:  # everything below
        for dependant in reverse.get(stack.pop(), ()):
            if dependant not in found:
                found.add(dependant)
                stack.append(dependant)
    groups: dict[str, list[str]] = {}
    for key, node in nodes.items():
        if node.transaction is not None:
            groups.setdefault(node.transaction, []).append(key)
    stack = list(found)
    while stack:  # and what decides it
        node = nodes[stack.pop()]
        near = [*node.prerequisites, *groups.get(node.transaction or "", ())]
        for key in near:
            if key in nodes and key not in found:
                found.add(key)
                stack.append(key)
    return found
