"""The typed blockers of a run's pending tasks, for the whole run or a region of it. Pure."""

from collections.abc import Collection, Mapping, Sequence

from runs.frontier_types import (
    PREREQUISITE,
    ROLES,
    STOPPED,
    TRANSACTION,
    UNFINISHED,
    ClaimView,
    GraphIndex,
    TaskNode,
    World,
)


def halt_blockers(
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


def evaluate(
    nodes: Mapping[str, TaskNode],
    world: World,
    keys: Collection[str],
    *,
    halt: tuple[str, ...],
    previous: Mapping[str, Collection[str]] | None,
    dependants_of: Mapping[str, Sequence[str]] | None = None,
    below: Collection[str] | None = None,
    groups_of: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, tuple[str, ...]]:
    """The sorted blockers of every pending task among `keys`.

    `keys` must hold every task whose blockers the change can alter, closed over transaction
    groups. Pending prerequisites outside `keys` are taken as they were in `previous` (their
    facts did not change). `dependants_of` (reverse edges, as in `GraphIndex`) spares rebuilding
    them when claims hold a producer's dependants. `below` (with `groups_of`, every group's
    members) names the tasks under the change: a group member outside it is blocked by a cause
    of its own as it was before, which its group's stored barriers tell (see `_before`).
    """
    not_up = world.down | world.unknown
    role_barriers = tuple(
        f"barrier:{role}" for role in ROLES if world.roles.get(role, "") in not_up
    )
    upstream = upstream_claims(nodes, world, keys, dependants_of)
    blockers_of: dict[str, list[str]] = {}
    hard: set[str] = set()  # blocked for a reason of its own or a prerequisite that stopped
    members: dict[str, list[str]] = {}
    for key in keys:
        node = nodes[key]
        if node.state != "pending":
            continue
        waiting, stopped = _prerequisite_blockers(nodes, node)
        own = _own_blockers(key, node, world, role_barriers, halt)
        own += _claim_blockers(nodes, node, world, upstream.get(key, ()))
        if stopped or own:
            hard.add(key)
        blockers_of[key] = waiting + own
        if node.transaction is not None:
            members.setdefault(node.transaction, []).append(key)

    groups = {name: keys_ for name, keys_ in members.items() if len(keys_) > 1}
    if groups:
        barred = _transaction_barred(
            nodes, keys, groups, hard, blockers_of, previous, below=below, groups_of=groups_of
        )
        for key in barred:
            blockers_of[key].append(TRANSACTION)
    return {
        key: tuple(sorted(set(blockers))) if blockers else ()
        for key, blockers in blockers_of.items()
    }


def _prerequisite_blockers(nodes: Mapping[str, TaskNode], node: TaskNode) -> tuple[list[str], bool]:
    """A blocker per prerequisite not yet succeeded, and whether one of them stopped (or is not
    in the run), which will not change without someone acting."""
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
    return blockers, stopped


def _own_blockers(
    key: str,
    node: TaskNode,
    world: World,
    role_barriers: tuple[str, ...],
    halt: tuple[str, ...],
) -> list[str]:
    """The blockers that hold a task whatever its prerequisites do: capabilities and barriers,
    open escalations and a global halt (its claims: `_claim_blockers`)."""
    blockers: list[str] = []
    down = world.down
    if down:
        blockers.extend("capability:" + name for name in node.capabilities if name in down)
        if any(name in down for name in node.reads_state_of):
            blockers.append("barrier:freshness")
    if node.effect == "external":
        # Uncertainty fails closed: an effect that cannot be undone waits on what nobody reported.
        blockers.extend("capability:" + name for name in node.capabilities if name in world.unknown)
        blockers.extend(role_barriers)
        uncertain = node.dependency_confidence == "uncertain" or (
            world.stop_unnamed_roles and bool(world.unnamed_roles)
        )
        if uncertain and not node.released:
            blockers.append("barrier:uncertain-dependency")
    if world.escalations:
        blockers.extend("escalation:" + e for e in world.escalations.get(key, ()))
    blockers.extend(halt)
    return blockers


def _claim_blockers(
    nodes: Mapping[str, TaskNode], node: TaskNode, world: World, upstream: Collection[str]
) -> list[str]:
    """`claim:<key>` for each claim that holds the task, but those it exists to check:

    - a claim it names in `consumes` that blocks (see `_blocks`);
    - `upstream`: the blocking claims of the tasks it depends on, when it named no `consumes`;
    - a claim refuted while it was running on it (a halt), until the claim is verified again;
    - and, even one it checks, a claim refuted while one of its prerequisites was running on
      it: what that work produced is held.
    """
    claims = world.claims
    found = {claim for claim in node.consumes if _blocks(claims.get(claim))}
    if node.implicit:
        found.update(upstream)
    found.update(c for c in node.halted_on if not _settled(claims.get(c)))
    found.difference_update(node.checks)
    # What a halted prerequisite produced is held whatever this task checks: declaring `checks`
    # does not let a task build on work done on a refuted claim.
    for holder in (nodes.get(p) for p in node.prerequisites):
        if holder is not None and holder.halted_on:
            found.update(c for c in holder.halted_on if not _settled(claims.get(c)))
    return ["claim:" + claim for claim in found]


def _blocks(view: ClaimView | None) -> bool:
    # A refuted claim blocks even when it is not load-bearing: its consumers stay blocked.
    return (
        view is None
        or view.status == "refuted"
        or (view.load_bearing and view.status != "verified")
    )


def _settled(view: ClaimView | None) -> bool:
    return view is not None and view.status == "verified"


def upstream_claims(
    nodes: Mapping[str, TaskNode],
    world: World,
    keys: Collection[str],
    dependants_of: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, set[str]]:
    """The blocking claims each pending task among `keys` consumes without naming them: those
    posted by the tasks it depends on, directly or through others, if it named no `consumes`.

    Only claims that block reach here (most runs have few at a time), and each is spread down
    from its producer once: the cost is the number of tasks below the producers of blocking
    claims, and nothing when no claim blocks or no task among `keys` consumes implicitly.
    """
    holding: dict[str, list[str]] = {}
    for claim, view in world.claims.items():
        if view.producer is not None and view.producer in nodes and _blocks(view):
            holding.setdefault(view.producer, []).append(claim)
    if not holding:
        return {}
    wanted = {k for k in keys if nodes[k].implicit and nodes[k].state == "pending"}
    if not wanted:
        return {}
    if dependants_of is None:
        reverse: dict[str, list[str]] = {}
        for key, node in nodes.items():
            for prerequisite in node.prerequisites:
                reverse.setdefault(prerequisite, []).append(key)
        dependants_of = reverse
    found: dict[str, set[str]] = {}
    for producer, claims in holding.items():
        seen: set[str] = set()
        stack = list(dependants_of.get(producer, ()))
        while stack:
            key = stack.pop()
            if key in seen:
                continue
            seen.add(key)
            if key in wanted:
                found.setdefault(key, set()).update(claims)
            stack.extend(dependants_of.get(key, ()))
    return found


def _transaction_barred(
    nodes: Mapping[str, TaskNode],
    keys: Collection[str],
    groups: Mapping[str, list[str]],
    hard: set[str],
    blockers_of: Mapping[str, list[str]],
    previous: Mapping[str, Collection[str]] | None,
    *,
    below: Collection[str] | None = None,
    groups_of: Mapping[str, Sequence[str]] | None = None,
) -> list[str]:
    """The pending members of a transaction group in which another pending member is blocked.

    Blocked is a least fixed point grounded in real blockers: a task is blocked by a hard blocker
    of its own, a blocked or stopped prerequisite, or a transaction barrier; a member counts for
    its group only when it is blocked by the first two (its own cause). Grounding it this way
    means a transaction barrier never holds itself up: when the cause clears, the group is free.
    """
    relevant: Collection[str]
    seeds: set[str]
    undecided: dict[str, list[str]] = {}
    if previous is None:
        # The whole run: spread from the real causes over every pending task.
        relevant, seeds = blockers_of.keys(), set(hard)
    else:
        known = (
            _before(nodes, groups, previous, below, groups_of)
            if below is not None and groups_of is not None
            else {}
        )
        relevant, seeds, undecided = _deciders(nodes, keys, groups, hard, blockers_of, known)

    dependants_of: dict[str, list[str]] = {}
    for key in relevant:
        for prerequisite in nodes[key].prerequisites:
            if prerequisite in relevant:
                dependants_of.setdefault(prerequisite, []).append(key)

    own: set[str] = set()
    blocked: set[str] = set()
    counted: dict[str, int] = {}
    work: list[tuple[bool, str]] = [(True, key) for key in seeds]
    outside: dict[str, bool] = {}
    while True:
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
        # A group with two members blocked by their own cause bars every member whatever else
        # holds; only when one has fewer do the prerequisites outside the region decide (each
        # walked up from the stored blockers, as it was: its facts did not change).
        if not undecided or all(counted.get(name, 0) >= 2 for name in groups):
            break
        for key, prerequisites in undecided.items():
            if key not in own and any(
                _was_blocked(nodes, p, previous, outside) for p in prerequisites
            ):
                work.append((True, key))
        undecided = {}

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
    known: Mapping[str, bool],
) -> tuple[set[str], set[str], dict[str, list[str]]]:
    """The tasks of a region that can decide its barriers (the members and their pending
    ancestors in the region), those among them blocked by a cause of their own (`known`:
    members whose own cause did not change, and what it is), and, for the others, their pending
    prerequisites outside the region (blocked or not as they were)."""
    relevant: set[str] = set()
    stack = [key for group in groups.values() for key in group]
    relevant.update(stack)
    seeds: set[str] = {key for key in stack if known.get(key)}
    undecided: dict[str, list[str]] = {}
    while stack:
        key = stack.pop()
        if key in hard:
            seeds.add(key)
            continue  # blocked by its own cause, whatever its prerequisites are
        if key in known:
            continue  # as it was: nothing above it changed
        for prerequisite in nodes[key].prerequisites:
            before = nodes.get(prerequisite)
            if before is None or before.state != "pending":
                continue  # stopped prerequisites are already in `hard`
            if prerequisite in blockers_of:
                if prerequisite not in relevant:
                    relevant.add(prerequisite)
                    stack.append(prerequisite)
            elif key not in seeds and prerequisite not in keys:
                undecided.setdefault(key, []).append(prerequisite)
    return relevant, seeds, undecided


def _before(
    nodes: Mapping[str, TaskNode],
    groups: Mapping[str, list[str]],
    previous: Mapping[str, Collection[str]],
    below: Collection[str],
    groups_of: Mapping[str, Sequence[str]],
) -> dict[str, bool]:
    """Whether each member outside `below` is blocked by a cause of its own, where its group's
    stored barriers tell: nothing above it changed, so it is as it was.

    Before the change, a pending member was barred when another pending member had a cause of
    its own. So when two or more stored members have no barrier, none had a cause; when exactly
    one has none, it alone had one. When every one is barred, the members with a hard blocker
    stored had a cause and the rest are not known (they are walked up, as before).
    """
    known: dict[str, bool] = {}
    for name, group in groups.items():
        outside = [key for key in group if key not in below]
        if not outside:
            continue
        stored = [key for key in groups_of.get(name, ()) if key in previous]
        if len(stored) < 2:
            continue
        free = [key for key in stored if TRANSACTION not in previous[key]]
        for key in outside:
            if key not in previous:
                continue
            if len(free) >= 2:
                known[key] = False
            elif len(free) == 1:
                known[key] = key == free[0]
            elif any(
                code != TRANSACTION and not code.startswith(PREREQUISITE) for code in previous[key]
            ):
                known[key] = True
    return known


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
