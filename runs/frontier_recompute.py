"""The incremental frontier: re-evaluate only what one change can reach. Pure."""

from collections.abc import Collection, Iterable, Mapping

from runs.frontier_blockers import evaluate, halt_blockers
from runs.frontier_types import UNFINISHED, GraphIndex, TaskNode, World


def dependants(nodes: Mapping[str, TaskNode]) -> dict[str, tuple[str, ...]]:
    """Reverse edges: each task's direct dependants, sorted (every task has an entry)."""
    reverse: dict[str, list[str]] = {key: [] for key in nodes}
    for key, node in nodes.items():
        for prerequisite in node.prerequisites:
            if prerequisite in reverse:
                reverse[prerequisite].append(key)
    return {key: tuple(sorted(set(keys))) for key, keys in reverse.items()}


def build_index(nodes: Mapping[str, TaskNode]) -> GraphIndex:
    groups: dict[str, list[str]] = {}
    needs: dict[str, set[str]] = {}
    external: list[str] = []
    for key, node in nodes.items():
        if node.transaction is not None:
            groups.setdefault(node.transaction, []).append(key)
        for name in (*node.capabilities, *node.reads_state_of):
            needs.setdefault(name, set()).add(key)
        if node.effect == "external":
            external.append(key)
    return GraphIndex(
        dependants=dependants(nodes),
        groups={name: tuple(sorted(keys)) for name, keys in groups.items()},
        needs={name: tuple(sorted(keys)) for name, keys in needs.items()},
        external=tuple(sorted(external)),
        feeds_groups=frozenset(_above(nodes, [k for keys in groups.values() for k in keys])),
    )


def _above(nodes: Mapping[str, TaskNode], keys: Iterable[str]) -> set[str]:
    """`keys` and every task they depend on, directly or through others."""
    seen = set(keys)
    stack = list(seen)
    while stack:
        for prerequisite in nodes[stack.pop()].prerequisites:
            if prerequisite not in seen and prerequisite in nodes:
                seen.add(prerequisite)
                stack.append(prerequisite)
    return seen


def recompute(
    nodes: Mapping[str, TaskNode],
    world: World,
    *,
    previous: Mapping[str, Collection[str]],
    changed: Iterable[str],
    index: GraphIndex | None = None,
    spread: Iterable[str] | None = None,
) -> dict[str, tuple[str, ...]]:
    """The pending tasks whose blockers differ from `previous` (`()` means now ready).

    `previous` holds the stored blockers of every pending task, computed on the facts before the
    change; `changed` names the tasks whose own facts changed (state, escalations, halts,
    `touched_by_claim` for a claim, `touched_by_capability` for a capability). Only those tasks, their descendants and their
    transaction groups (closed under the same rule) are evaluated. Pass an `index` from
    `build_index` to avoid rebuilding it on every call. A change in the set of capabilities that
    holds a global halt changes every pending task, and the whole run is evaluated.

    `spread` names the changed tasks whose every descendant must be evaluated again: those whose
    claims changed (a claim checked, posted or superseded), which their dependants consume
    implicitly. None (the default) takes every changed task. Below the others only a task's
    direct dependants (its state is their prerequisite) and what can bar a transaction group
    (`GraphIndex.feeds_groups`) are evaluated: a task's blockers name its prerequisites, not
    theirs, and the change reaches the rest only through a group.
    """
    if index is None:
        index = build_index(nodes)
    halt = halt_blockers(nodes, world, index)
    if set(halt) != _halt_of(previous):
        keys: Collection[str] = nodes.keys()
        below: Collection[str] | None = None
    else:
        changed = set(changed)
        keys, below = _reach(nodes, changed, index, changed if spread is None else set(spread))
    evaluated = evaluate(
        nodes,
        world,
        keys,
        halt=halt,
        previous=previous,
        dependants_of=index.dependants,
        below=below,
        groups_of=index.groups,
    )
    updates: dict[str, tuple[str, ...]] = {}
    for key in sorted(evaluated):
        before = previous.get(key)
        if before is None or tuple(sorted(before)) != evaluated[key]:
            updates[key] = evaluated[key]
    return updates


def touched_by_capability(
    nodes: Mapping[str, TaskNode], name: str, world: World, *, index: GraphIndex | None = None
) -> set[str]:
    """The tasks whose own conditions mention capability `name`: the `changed` for `recompute`.

    Those that require it or read its state, the external ones when it holds one of the fleet's
    roles, and under a global halt every unfinished task.
    """
    if world.policy == "global_halt":
        return {key for key, node in nodes.items() if node.state in UNFINISHED}
    is_role = name in world.roles.values()
    if index is not None:
        touched = set(index.needs.get(name, ()))
        if is_role:
            touched.update(index.external)
        return touched
    return {
        key
        for key, node in nodes.items()
        if name in node.capabilities
        or name in node.reads_state_of
        or (is_role and node.effect == "external")
    }


def touched_by_claim(nodes: Mapping[str, TaskNode], world: World, claim: str) -> set[str]:
    """The tasks whose own conditions mention claim `claim`: the `changed` for `recompute`.

    Those that name it in `consumes` or `checks`, those halted on it, and the task that posted
    it, through which `recompute` reaches every task that consumes it implicitly. Pass the
    world from before the change when the claim's producer changed (a superseded claim).
    """
    touched = {
        key
        for key, node in nodes.items()
        if claim in node.consumes or claim in node.checks or claim in node.halted_on
    }
    view = world.claims.get(claim)
    if view is not None and view.producer is not None and view.producer in nodes:
        touched.add(view.producer)
    return touched


def _halt_of(previous: Mapping[str, Collection[str]]) -> set[str]:
    # Every pending task carries the same halt blockers, so any one entry tells.
    for blockers in previous.values():
        return {blocker for blocker in blockers if blocker.startswith("halt:")}
    return set()


def _reach(
    nodes: Mapping[str, TaskNode], changed: set[str], index: GraphIndex, spread: set[str]
) -> tuple[set[str], set[str]]:
    """What a change can alter: the changed tasks, their direct dependants, every descendant of
    those in `spread`, and, closed over dependants and transaction groups, whatever can bar a
    group. Also returns the tasks below the change (the changed ones and their descendants
    reached): whether a task outside them is blocked did not change."""
    seen = {key for key in changed if key in nodes}
    below = set(seen)
    spreading = {key for key in seen if key in spread}
    stack = [(key, key in spread) for key in seen]
    dependants_of = index.dependants
    groups = index.groups
    feeds = index.feeds_groups
    while stack:
        key, everything = stack.pop()
        direct = key in changed
        for dependant in dependants_of.get(key, ()):
            if not (everything or direct or dependant in feeds):
                continue
            # Below the change even when seen already (a member its group brought in): whether
            # it is blocked can change with this task's.
            below.add(dependant)
            if everything and dependant not in spreading:
                spreading.add(dependant)
            elif dependant in seen:
                continue
            seen.add(dependant)
            stack.append((dependant, everything))
        transaction = nodes[key].transaction
        if transaction is not None:
            for member in groups.get(transaction, ()):
                if member not in seen:
                    seen.add(member)
                    stack.append((member, False))
    return seen, below
