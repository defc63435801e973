"""The frontier: which pending tasks may start now, and the typed blockers of the rest. Pure.

`frontier` evaluates a whole run; `recompute` re-evaluates only what one change can reach (the
descendants of the changed tasks, closed over transaction groups), so that a capability coming
back costs time in proportion to the work it touches, not to the size of the run.

Everything here is iterative (no recursion), so a 10,000-deep chain is fine, and the result does
not depend on the order of the mappings it is given.
"""

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

TASK_STATES: Final = ("pending", "running", "succeeded", "failed", "escalated", "cancelled")
EFFECTS: Final = ("none", "reversible", "external")
CONFIDENCES: Final = ("declared", "uncertain")
POLICIES: Final = ("scoped", "global_halt")
ROLES: Final = ("authority", "observability", "rollback")
CLAIM_STATUSES: Final = ("unverified", "verified", "refuted")

# Same as Task.UNFINISHED: the states whose needs hold a global halt.
UNFINISHED: Final = frozenset({"pending", "running", "escalated"})
# A prerequisite in one of these states will not succeed without someone acting: it blocks.
STOPPED: Final = frozenset({"failed", "escalated", "cancelled"})

PREREQUISITE: Final = "prerequisite:"
TRANSACTION: Final = "barrier:transaction"


@dataclass(frozen=True, slots=True)
class TaskNode:
    key: str
    state: str = "pending"
    prerequisites: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()
    reads_state_of: tuple[str, ...] = ()
    effect: str = "none"
    dependency_confidence: str = "declared"
    transaction: str | None = None
    consumes: tuple[str, ...] = ()
    weight: int = 1
    released: bool = False  # a reviewer released its uncertain-dependency stop boundary

    def __post_init__(self) -> None:
        if self.state not in TASK_STATES:
            raise ValueError(f"task {self.key!r}: unknown state {self.state!r}")
        if self.effect not in EFFECTS:
            raise ValueError(f"task {self.key!r}: unknown effect {self.effect!r}")
        if self.dependency_confidence not in CONFIDENCES:
            raise ValueError(
                f"task {self.key!r}: unknown dependency confidence {self.dependency_confidence!r}"
            )


@dataclass(frozen=True, slots=True)
class ClaimView:
    status: str  # unverified|verified|refuted
    load_bearing: bool


@dataclass(frozen=True)
class World:
    """The facts outside the graph: capabilities down, the fleet's roles, claims, escalations."""

    down: frozenset[str] = frozenset()
    roles: Mapping[str, str] = field(default_factory=dict)  # role -> capability name
    claims: Mapping[str, ClaimView] = field(default_factory=dict)
    escalations: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # task -> open ids
    policy: str = "scoped"

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r} (one of {', '.join(POLICIES)})")


@dataclass(frozen=True)
class Frontier:
    policy: str
    ready: tuple[str, ...]
    deferred: dict[str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class GraphIndex:
    """The structure of a run, built once and reused by `recompute` and `touched_by_capability`.

    It depends only on the tasks' keys, prerequisites, transactions, capabilities, state reads and
    effects, so it stays valid while states, claims, escalations and the world change; rebuild it
    when tasks are added to the run.
    """

    dependants: Mapping[str, tuple[str, ...]]
    groups: Mapping[str, tuple[str, ...]]  # transaction -> its members
    needs: Mapping[str, tuple[str, ...]]  # capability -> tasks requiring it or reading its state
    external: tuple[str, ...]  # tasks with an external effect


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
    )


def frontier(nodes: Mapping[str, TaskNode], world: World) -> Frontier:
    """The safe ready frontier of a run and the typed blockers of every other pending task."""
    halt = _halt_blockers(nodes, world, None)
    evaluated = _evaluate(nodes, world, nodes.keys(), halt=halt, previous=None)
    return Frontier(
        policy=world.policy,
        ready=tuple(sorted(key for key, blockers in evaluated.items() if not blockers)),
        deferred={key: evaluated[key] for key in sorted(evaluated) if evaluated[key]},
    )


def recompute(
    nodes: Mapping[str, TaskNode],
    world: World,
    *,
    previous: Mapping[str, Collection[str]],
    changed: Iterable[str],
    index: GraphIndex | None = None,
) -> dict[str, tuple[str, ...]]:
    """The pending tasks whose blockers differ from `previous` (`()` means now ready).

    `previous` holds the stored blockers of every pending task, computed on the facts before the
    change; `changed` names the tasks whose own facts changed (state, claims, escalations, or
    `touched_by_capability` for a capability). Only those tasks, their descendants and their
    transaction groups (closed under the same rule) are evaluated. Pass an `index` from
    `build_index` to avoid rebuilding it on every call. A change in the set of capabilities that
    holds a global halt changes every pending task, and the whole run is evaluated.
    """
    if index is None:
        index = build_index(nodes)
    halt = _halt_blockers(nodes, world, index)
    keys: Collection[str] = (
        nodes.keys() if set(halt) != _halt_of(previous) else _reach(nodes, changed, index)
    )
    evaluated = _evaluate(nodes, world, keys, halt=halt, previous=previous)
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


def _halt_blockers(
    nodes: Mapping[str, TaskNode], world: World, index: GraphIndex | None
) -> tuple[str, ...]:
    """`halt:<capability>` for each down capability that an unfinished task needs (global halt)."""
    if world.policy != "global_halt" or not world.down:
        return ()
    down = world.down
    holding: set[str] = set()
    if index is not None:
        for name in down:
            if any(nodes[key].state in UNFINISHED for key in index.needs.get(name, ())):
                holding.add(name)
    else:
        for node in nodes.values():
            if node.state in UNFINISHED:
                holding.update(c for c in (*node.capabilities, *node.reads_state_of) if c in down)
    return tuple(f"halt:{name}" for name in sorted(holding))


def _halt_of(previous: Mapping[str, Collection[str]]) -> set[str]:
    # Every pending task carries the same halt blockers, so any one entry tells.
    for blockers in previous.values():
        return {blocker for blocker in blockers if blocker.startswith("halt:")}
    return set()


def _reach(nodes: Mapping[str, TaskNode], changed: Iterable[str], index: GraphIndex) -> set[str]:
    """The changed tasks closed over dependants and transaction groups."""
    seen = {key for key in changed if key in nodes}
    stack = list(seen)
    dependants_of = index.dependants
    groups = index.groups
    while stack:
        key = stack.pop()
        for dependant in dependants_of.get(key, ()):
            if dependant not in seen:
                seen.add(dependant)
                stack.append(dependant)
        transaction = nodes[key].transaction
        if transaction is not None:
            for member in groups.get(transaction, ()):
                if member not in seen:
                    seen.add(member)
                    stack.append(member)
    return seen


def _evaluate(
    nodes: Mapping[str, TaskNode],
    world: World,
    keys: Collection[str],
    *,
    halt: tuple[str, ...],
    previous: Mapping[str, Collection[str]] | None,
) -> dict[str, tuple[str, ...]]:
    """The sorted blockers of every pending task among `keys`.

    `keys` must be closed over dependants and transaction groups. Pending prerequisites outside
    `keys` are taken as they were in `previous` (their facts did not change).
    """
    down = world.down
    claims = world.claims
    escalations = world.escalations
    roles = world.roles
    role_barriers = tuple(f"barrier:{role}" for role in ROLES if roles.get(role, "") in down)

    blockers_of: dict[str, list[str]] = {}
    hard: set[str] = set()  # blocked for a reason of its own or a prerequisite that stopped
    members: dict[str, list[str]] = {}
    for key in keys:
        node = nodes[key]
        if node.state != "pending":
            continue
        blockers: list[str] = []
        stopped = False
        for prerequisite in node.prerequisites:
            before = nodes.get(prerequisite)
            if before is None:
                blockers.append(PREREQUISITE + prerequisite)
                stopped = True
            elif before.state != "succeeded":
                blockers.append(PREREQUISITE + prerequisite)
                if before.state in STOPPED:
                    stopped = True
        waiting = len(blockers)
        if down:
            for name in node.capabilities:
                if name in down:
                    blockers.append("capability:" + name)
            for name in node.reads_state_of:
                if name in down:
                    blockers.append("barrier:freshness")
                    break
        if node.effect == "external":
            blockers.extend(role_barriers)
            if node.dependency_confidence == "uncertain" and not node.released:
                blockers.append("barrier:uncertain-dependency")
        for claim in node.consumes:
            view = claims.get(claim)
            # A refuted claim blocks even when it is not load-bearing: its consumers stay blocked.
            if (
                view is None
                or view.status == "refuted"
                or (view.load_bearing and view.status != "verified")
            ):
                blockers.append("claim:" + claim)
        if escalations:
            for escalation in escalations.get(key, ()):
                blockers.append("escalation:" + escalation)
        if halt:
            blockers.extend(halt)
        if stopped or len(blockers) > waiting:
            hard.add(key)
        blockers_of[key] = blockers
        if node.transaction is not None:
            members.setdefault(node.transaction, []).append(key)

    groups = {name: keys_ for name, keys_ in members.items() if len(keys_) > 1}
    if groups:
        for key in _transaction_barred(nodes, keys, groups, hard, blockers_of, previous):
            blockers_of[key].append(TRANSACTION)
    return {
        key: tuple(sorted(set(blockers))) if blockers else ()
        for key, blockers in blockers_of.items()
    }


def _transaction_barred(
    nodes: Mapping[str, TaskNode],
    keys: Collection[str],
    groups: Mapping[str, list[str]],
    hard: set[str],
    blockers_of: Mapping[str, list[str]],
    previous: Mapping[str, Collection[str]] | None,
) -> list[str]:
    """The pending members of a transaction group in which another pending member is blocked.

    Blocked is a least fixed point grounded in real blockers: a task is blocked by a hard blocker
    of its own, a blocked or stopped prerequisite, or a transaction barrier; a member counts for
    its group only when it is blocked by the first two (its own cause). Grounding it this way
    means a transaction barrier never holds itself up: when the cause clears, the group is free.
    """
    relevant: Collection[str]
    seeds: set[str]
    if previous is None:
        # The whole run: spread from the real causes over every pending task.
        relevant, seeds = blockers_of.keys(), set(hard)
    else:
        relevant, seeds = _deciders(nodes, keys, groups, hard, blockers_of, previous)

    dependants_of: dict[str, list[str]] = {}
    for key in relevant:
        for prerequisite in nodes[key].prerequisites:
            if prerequisite in relevant:
                dependants_of.setdefault(prerequisite, []).append(key)

    own: set[str] = set()
    blocked: set[str] = set()
    counted: dict[str, int] = {}
    work: list[tuple[bool, str]] = [(True, key) for key in seeds]
    while work:
        is_own, key = work.pop()
        if is_own and key not in own:
            own.add(key)
            transaction = nodes[key].transaction
            if transaction is not None and transaction in groups:
                counted[transaction] = counted.get(transaction, 0) + 1
                if counted[transaction] == 1:
                    work.extend((False, m) for m in groups[transaction] if m != key)
        if key in blocked:
            continue
        blocked.add(key)
        work.extend((True, dependant) for dependant in dependants_of.get(key, ()))

    barred: list[str] = []
    for transaction, group in groups.items():
        count = counted.get(transaction, 0)
        for key in group:
            if count - (key in own) > 0:
                barred.append(key)
    return barred


def _deciders(
    nodes: Mapping[str, TaskNode],
    keys: Collection[str],
    groups: Mapping[str, list[str]],
    hard: set[str],
    blockers_of: Mapping[str, list[str]],
    previous: Mapping[str, Collection[str]],
) -> tuple[set[str], set[str]]:
    """The tasks of a region that can decide its barriers (the members and their pending
    ancestors in the region), and those among them blocked by a cause of their own."""
    relevant: set[str] = set()
    stack = [key for group in groups.values() for key in group]
    relevant.update(stack)
    seeds: set[str] = set()
    outside: dict[str, bool] = {}
    while stack:
        key = stack.pop()
        if key in hard:
            seeds.add(key)
            continue  # blocked by its own cause, whatever its prerequisites are
        for prerequisite in nodes[key].prerequisites:
            before = nodes.get(prerequisite)
            if before is None or before.state != "pending":
                continue  # stopped prerequisites are already in `hard`
            if prerequisite in blockers_of:
                if prerequisite not in relevant:
                    relevant.add(prerequisite)
                    stack.append(prerequisite)
            elif (
                key not in seeds
                and prerequisite not in keys
                and _was_blocked(nodes, prerequisite, previous, outside)
            ):
                seeds.add(key)
    return relevant, seeds


def _was_blocked(
    nodes: Mapping[str, TaskNode],
    key: str,
    previous: Mapping[str, Collection[str]] | None,
    memo: dict[str, bool],
) -> bool:
    """Whether a pending task outside the evaluated region was blocked, from its stored blockers.

    Its facts and its ancestors' did not change, so its stored blockers still hold: a blocker
    other than a prerequisite means blocked; otherwise it is blocked when a prerequisite is. The
    stored blockers cannot tell waiting from blocked, so this walks up the waiting tasks above it
    (once per call, memoised), stopping at the first blocked one.
    """
    stored = previous or {}
    stack = [key]
    expanded: set[str] = set()
    while stack:
        current = stack[-1]
        if current in memo:
            stack.pop()
            continue
        entry = stored.get(current)
        # Every other kind of blocker sorts before "prerequisite:".
        if entry and not min(entry).startswith(PREREQUISITE):
            memo[current] = True
            stack.pop()
            continue
        result = False
        unknown: list[str] = []
        revisit = current in expanded
        for prerequisite in nodes[current].prerequisites:
            before = nodes.get(prerequisite)
            if before is None:
                result = True
                break
            state = before.state
            if state == "pending":
                known = memo.get(prerequisite)
                if known:
                    result = True
                    break
                if known is None and not revisit:
                    unknown.append(prerequisite)
            elif state in STOPPED:
                result = True
                break
        if result or not unknown:
            memo[current] = result
            stack.pop()
        else:
            expanded.add(current)
            stack.extend(unknown)
    return memo[key]
