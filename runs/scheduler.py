"""The scheduler: loads a run's facts, asks the frontier rule, and writes only what changed."""

import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from fleet import rows
from fleet.broker import after_commit
from fleet.models import Capability, Fleet
from fleet.outbox import notify
from fleet.prepared import prepared_cursor
from runs import frontier as rule
from runs import holds, selectors, tasks
from runs.models import (
    Attempt,
    Blocker,
    Claim,
    Decision,
    FrontierChange,
    Halt,
    Prerequisite,
    Run,
    Task,
)

HARD = ("capability:", "barrier:", "claim:", "escalation:", "halt:")
ESCALATION = "escalation:"  # a hold the desk placed: the frontier names it as this blocker


def world_for(run: Run) -> rule.World:
    claims = Claim.objects.filter(run=run).values_list(
        "key", "status", "load_bearing", "task__key", "superseded"
    )
    return world_of(
        run,
        capabilities=Capability.objects.filter(fleet_id=run.fleet_id).values_list(
            "name", "status", "role"
        ),
        claims=claims,
        held=holds.held(run),
    )


def world_of(
    run: Run,
    *,
    capabilities: Iterable[Sequence[Any]],
    claims: Iterable[Sequence[Any]],
    held: Mapping[str, Iterable[str]],
    stop_unnamed_roles: bool | None = None,
) -> rule.World:
    """The run's world from its rows: the fleet's capabilities (name, status, role), the run's
    claims (key, status, load_bearing, producer's key, superseded, ...), its holds' codes by
    task key, and the fleet's `unnamed_roles_stop` (read from `run.fleet` unless given)."""
    capabilities = list(capabilities)
    escalations = {
        key: tuple(code.removeprefix(ESCALATION) for code in codes if code.startswith(ESCALATION))
        for key, codes in held.items()
    }
    return rule.World(
        down=frozenset(
            name for name, status, _ in capabilities if status == Capability.Status.DOWN
        ),
        unknown=frozenset(
            name for name, status, _ in capabilities if status == Capability.Status.UNKNOWN
        ),
        stop_unnamed_roles=(
            run.fleet.unnamed_roles_stop if stop_unnamed_roles is None else stop_unnamed_roles
        ),
        roles={role: name for name, _, role in capabilities if role},
        claims={
            key: rule.ClaimView(
                status=status,
                load_bearing=load_bearing,
                producer=None if superseded else producer,
            )
            for key, status, load_bearing, producer, superseded, *_ in claims
        },
        escalations={key: ids for key, ids in escalations.items() if ids},
        policy=run.policy,
    )


TaskMeta = dict[str, tuple[int, bool, str, list[str]]]  # key -> (id, ready, agent, refresh)


def nodes_for(
    run: Run,
    *,
    meta: TaskMeta | None = None,
) -> dict[str, rule.TaskNode]:
    """The run's tasks as the frontier rule sees them; fills `meta` with what writes need."""
    edges: dict[int, list[str]] = {}
    for task_id, key in Prerequisite.objects.filter(task__run=run).values_list(
        "task_id", "requires__key"
    ):
        edges.setdefault(task_id, []).append(key)
    halted: dict[int, list[str]] = {}
    for task_id, claim in Halt.objects.filter(task__run=run, settled_at__isnull=True).values_list(
        "task_id", "key"
    ):
        halted.setdefault(task_id, []).append(claim)
    nodes = {}
    for row in Task.objects.filter(run=run).values(
        "pk", "key", "state", "capabilities", "reads_state_of", "effect",
        "dependency_confidence", "transaction", "consumes", "consumes_declared", "checks",
        "weight", "released", "ready", "agent__name", "refresh",
    ):  # fmt: skip
        key = row["key"]
        if meta is not None:
            meta[key] = (row["pk"], row["ready"], row["agent__name"], row["refresh"])
        nodes[key] = rule.TaskNode(
            key=key,
            state=row["state"],
            prerequisites=tuple(edges.get(row["pk"], ())),
            capabilities=tuple(row["capabilities"]),
            reads_state_of=tuple(row["reads_state_of"]),
            effect=row["effect"],
            dependency_confidence=row["dependency_confidence"],
            transaction=row["transaction"] or None,
            consumes=tuple(dict.fromkeys(row["consumes"])),
            weight=row["weight"],
            released=row["released"],
            implicit=not row["consumes_declared"],
            checks=tuple(row["checks"]),
            halted_on=tuple(sorted(halted.get(row["pk"], ()))),
        )
    return nodes


def facts_of(run: Run) -> "Facts":
    """The run's tasks and world as the frontier rule sees them (`nodes_for`, `world_for`): one
    statement on PostgreSQL (`facts_for`)."""
    return facts_for([run])[run.pk]


def blockers_of(run: Run, task: Task, *, extra_consumes: Sequence[str] = ()) -> tuple[str, ...]:
    """The task's blockers right now: the gate for task.started.

    A claim the attempt names in `consumes` is load-bearing for it (naming it raises it), so it
    gates the start whatever its producer said.
    """
    nodes, world = facts_of(run)
    if extra_consumes:
        node = nodes[task.key]
        nodes[task.key] = replace(
            node, consumes=tuple(dict.fromkeys([*node.consumes, *extra_consumes]))
        )
        claims = dict(world.claims)
        for key in extra_consumes:
            if key in claims:
                claims[key] = replace(claims[key], load_bearing=True)
        world = replace(world, claims=claims)
    result = rule.frontier(nodes, world)
    return result.deferred.get(task.key, ())


def frontier_of(run: Run) -> rule.Frontier:
    return rule.frontier(*facts_of(run))


@dataclass
class Marks:
    """What one batch of events changed in each run, stored as one change per run at its end."""

    runs: dict[int, tuple[set[str], set[str], set[str]]] = field(default_factory=dict)
    # run id -> (changed task keys, capabilities, claims)
    holding: set[int] = field(default_factory=set)  # runs with a change that may hold a task


_batch: ContextVar[Marks | None] = ContextVar("frontier_batch", default=None)


@contextmanager
def batched() -> Iterator[None]:
    """Within the block (one transaction), the changes to each run are stored together at its
    end, with one recompute after commit. A change that may hold back a ready task is marked at
    once, so that a start later in the block sees that its run's frontier is stale."""
    marks = Marks()
    token = _batch.set(marks)
    try:
        yield
    finally:
        _batch.reset(token)
    rows = []
    for run_id, (keys, capabilities, claims) in marks.runs.items():
        rows.append(FrontierChange(run_id=run_id, keys=sorted(keys), claims=sorted(claims),
                                   may_hold=False))  # fmt: skip
        rows += [FrontierChange(run_id=run_id, keys=[], capability=c) for c in sorted(capabilities)]
    FrontierChange.objects.bulk_create(rows)
    for run_id in marks.runs:
        recompute_after_commit(run_id)


def batching() -> bool:
    """Whether the changes are gathered (`batched`): `mark_changed` records them at its end."""
    return _batch.get() is not None


def mark_changed(
    run: Run,
    keys: Iterable[str] | None,
    *,
    capability: str | None = None,
    claim: str | None = None,
    may_hold: bool = True,
) -> None:
    """Record that the run's frontier must be recomputed, and ask a worker after commit.

    `keys` are the tasks whose own facts changed (None: all); `capability` or `claim` names what
    changed besides them: the recompute adds the tasks whose own conditions mention it.
    `may_hold` False says the change cannot hold back a task that is ready now.
    """
    marks = _batch.get()
    if marks is not None and keys is not None:
        if may_hold and run.pk not in marks.holding:
            FrontierChange.objects.create(run=run, keys=[])
            marks.holding.add(run.pk)
        changed, capabilities, claims = marks.runs.setdefault(run.pk, (set(), set(), set()))
        changed.update(keys)
        if capability:
            capabilities.add(capability)
        if claim:
            claims.add(claim)
        return
    change = rows.new(
        FrontierChange,
        run_id=run.pk,
        keys=None if keys is None else sorted(set(keys)),
        capability=capability or "",
        claims=[claim] if claim else [],
        may_hold=may_hold,
    )
    rows.add(change)
    recompute_after_commit(run.pk)


# While a recompute sent for a run has not started, the changes committed since wait for it.
RECOMPUTE_ON_ITS_WAY_SECONDS = 10


def recompute_after_commit(run_id: int) -> None:
    """Ask a worker to catch the run's frontier up with its pending changes, after commit: one
    send for a run whose recompute is not on its way yet (a busy run's events share one)."""
    on_its_way = f"recompute:{connection.settings_dict['NAME']}:{run_id}"  # one per database
    after_commit(
        tasks.recompute,
        run_id,
        [],
        unless_on_its_way=(on_its_way, RECOMPUTE_ON_ITS_WAY_SECONDS),
        on_its_way=on_its_way,
    )


def capability_changed(*, fleet: Fleet, name: str) -> None:
    for run in Run.objects.filter(fleet=fleet, state=Run.State.RUNNING):
        mark_changed(run, [], capability=name)


def open_blockers(run: Run) -> dict[str, tuple[str, ...]]:
    """The stored blockers of every pending task (() when it is ready)."""
    stored: dict[str, list[str]] = {}
    for key, code in Blocker.objects.filter(task__run=run, cleared_at__isnull=True).values_list(
        "task__key", "code"
    ):
        stored.setdefault(key, []).append(code)
    pending = Task.objects.filter(run=run, state=Task.State.PENDING).values_list("key", "ready")
    return {
        key: tuple(sorted(stored.get(key, ()))) for key, ready in pending if ready or key in stored
    }


@transaction.atomic
def recompute(
    run_id: int,
    changed: Sequence[str] | None = None,
    capability: str | None = None,
    claims: Sequence[str] | None = None,
) -> dict[str, tuple[str, ...]]:
    """Bring the stored frontier of a run up to date; returns the tasks whose blockers changed.

    What changed is read from the run's pending changes (each recompute catches up with all of
    them), with what the arguments add; `changed` None means everything (the reconciler's path).
    A recompute that finds nothing pending and is given nothing returns at once.
    """
    # NO KEY UPDATE: events insert rows referencing the run (a key-share lock) while it recomputes.
    run = Run.objects.select_for_update(no_key=True).get(pk=run_id)
    pending = list(
        FrontierChange.objects.filter(run=run).values_list("pk", "keys", "capability", "claims")
    )
    if not pending and changed is not None and not changed and not capability and not claims:
        return {}  # an earlier recompute caught up with the change this one was sent for
    everything = changed is None or any(row_keys is None for _, row_keys, _, _ in pending)
    given = set(changed or ())
    spreading = set(given)
    capabilities = {capability} if capability else set()
    claimed = set(claims or ())
    for _, row_keys, name, names in pending:
        given.update(row_keys or ())
        if name and not row_keys and not names:
            capabilities.add(name)  # a capability alone: below what needs it nothing spreads
        else:
            spreading.update(row_keys or ())
            capabilities.update([name] if name else [])
        claimed.update(names)
    meta: TaskMeta = {}
    nodes = nodes_for(run, meta=meta)
    world = world_for(run)
    previous = open_blockers(run)
    if everything:
        keys: set[str] = set(nodes)
    else:
        new = {k for k, n in nodes.items() if n.state == Task.State.PENDING and k not in previous}
        keys = given | new
        spreading |= new
    for name in sorted(capabilities):
        keys |= rule.touched_by_capability(nodes, name, world)
    for claim in sorted(claimed):
        touched = rule.touched_by_claim(nodes, world, claim)
        keys |= touched
        spreading |= touched
    # A capability's change holds or frees the tasks that need it; below them nothing but their
    # direct dependants and what can bar a transaction group changes. Any other change may be a
    # claim's, which its producer's dependants consume: everything below it is evaluated.
    updates = rule.recompute(
        nodes, world, previous=previous, changed=keys, spread=None if everything else spreading
    )
    write(run, updates, previous=previous, meta=meta)
    settle_halts(run, nodes, world)
    # A task that left `pending` (started, escalated, cancelled) no longer waits on anything.
    Blocker.objects.filter(task__run=run, cleared_at__isnull=True).exclude(
        task__state=Task.State.PENDING
    ).update(cleared_at=timezone.now())
    FrontierChange.objects.filter(pk__in=[pk for pk, _, _, _ in pending]).delete()
    settle(run)
    return updates


def settle_halts(run: Run, nodes: Mapping[str, rule.TaskNode], world: rule.World) -> None:
    """Close the halts whose claim is verified again (or answered by a reviewer) now."""
    settled = {
        claim
        for node in nodes.values()
        for claim in node.halted_on
        if (view := world.claims.get(claim)) is not None and view.status == Claim.Status.VERIFIED
    }
    if settled:
        Halt.objects.filter(task__run=run, key__in=sorted(settled), settled_at__isnull=True).update(
            settled_at=timezone.now()
        )


def write(
    run: Run,
    updates: dict[str, tuple[str, ...]],
    *,
    previous: Mapping[str, tuple[str, ...]] | None = None,
    meta: TaskMeta | None = None,
) -> None:
    """Store new blockers (set now), clear old ones, flip ready flags: only the changed rows.

    `previous` (the stored blockers) and `meta` spare the reads when the caller has them.
    """
    if not updates:
        return
    now = timezone.now()
    if meta is None:
        found = Task.objects.filter(run=run, key__in=list(updates)).values_list(
            "pk", "key", "ready", "agent__name", "refresh"
        )
        meta = {key: (pk, ready, agent, refresh) for pk, key, ready, agent, refresh in found}
    if previous is None:
        previous = open_blockers(run)
    to_clear: dict[str, list[int]] = {}
    to_add: list[tuple[int, str, datetime]] = []  # task_id, code, set_at
    became_ready: list[int] = []
    became_deferred: list[int] = []
    notifies = bool(run.fleet.callback_url) and run.fleet.callback_disabled_at is None
    for key, blockers in updates.items():
        pk, ready, agent, refresh = meta[key]
        current = previous.get(key, ())
        for code in current:
            if code not in blockers:
                to_clear.setdefault(code, []).append(pk)
        to_add += [(pk, code, now) for code in blockers if code not in current]
        if not blockers and not ready:
            became_ready.append(pk)
        elif blockers and ready:
            became_deferred.append(pk)
        if not notifies:
            continue
        hard_before = {c for c in current if c.startswith(HARD)}
        hard_after = {c for c in blockers if c.startswith(HARD)}
        if not blockers and not ready:
            ready_data: dict[str, Any] = {"run": run.key, "task": key, "agent": agent}
            if refresh:  # capabilities that came back whose state it reads: re-read them first
                ready_data["refresh"] = list(refresh)
            notify(run.fleet, "task.ready", ready_data)
        elif (hard_after and hard_after != hard_before) or (blockers and ready):
            # A new hard blocker, or a task told it was ready that no longer is (its
            # prerequisite reframed by a refutation, say): it must not start now.
            notify(
                run.fleet,
                "task.deferred",
                {"run": run.key, "task": key, "agent": agent, "blockers": list(blockers)},
            )
    # One statement per distinct code: a capability change clears the same code everywhere.
    for code, ids in to_clear.items():
        Blocker.objects.filter(task_id__in=ids, code=code, cleared_at__isnull=True).update(
            cleared_at=now
        )
    # A capability going down sets thousands at once: their rows alone, with COPY.
    rows.copy(Blocker, ("task_id", "code", "set_at"), to_add)
    if became_ready:
        Task.objects.filter(pk__in=became_ready).update(ready=True)
    if became_deferred:
        Task.objects.filter(pk__in=became_deferred).update(ready=False)


def verify_after_commit(claim: Claim) -> None:
    claim_id = claim.pk
    after_commit(tasks.verify_claim, claim_id)


def decision_before(task: Task, number: int) -> Decision | None:
    """The decision that led to attempt `number`: the latest one on the attempt before it."""
    if number == 1:
        return None
    return (
        Decision.objects.filter(task=task, attempt__number=number - 1)
        .select_related("attempt")
        .order_by("-created_at", "-id")
        .first()
    )


def attempt_flags(task: Task, number: int) -> dict[str, Any]:
    """What the decision that led to this attempt changed: reframed, rerouted or resumed.

    The start gate (runs.task_state) has checked that the attempt did what the decision said.
    """
    decision = decision_before(task, number)
    if decision is None:
        return {}
    return {
        "reframed": decision.action == Decision.Action.REFRAME,
        "rerouted": decision.action == Decision.Action.REROUTE,
        "resumed": decision.action == Decision.Action.RESUME,
    }


def after_finish(run: Run, task: Task, attempt: Attempt, *, imported: bool) -> None:
    """After task.finished: recompute, and ask the retry policy when the attempt needs a decision.

    A succeeded attempt that left killed background work stands only once the policy says so
    (it may be resumed first), so its recompute waits for that decision.
    """
    needs_decision = not imported and (
        attempt.outcome == Attempt.Outcome.FAILED or bool(attempt.background_killed)
    )
    if not (needs_decision and attempt.outcome == Attempt.Outcome.SUCCEEDED):
        # A success only releases; a failure stops what waits on it (and may bar its group).
        mark_changed(run, [task.key], may_hold=attempt.outcome != Attempt.Outcome.SUCCEEDED)
    if needs_decision:
        attempt_id = attempt.pk
        after_commit(tasks.after_attempt, attempt_id)


def settle(run: Run) -> None:
    """A run whose every task succeeded (or was cancelled) has succeeded.

    Called from the recompute, which holds the run's lock and sees every committed finish: two
    last tasks finishing at once cannot both miss each other. A success the retry policy has
    not decided on yet (killed background work: it may be resumed) does not settle the run.
    """
    states = set(Task.objects.filter(run=run).values_list("state", flat=True))
    if (
        run.state == Run.State.RUNNING
        and states
        and states <= {Task.State.SUCCEEDED, Task.State.CANCELLED}
        and (run.imported or not selectors.undecided_attempts().filter(task__run=run).exists())
    ):
        # It finished when its last task did (an event's time: an imported run's is its own).
        last = Task.objects.filter(run=run).aggregate(last=Max("finished_at"))["last"]
        Run.objects.filter(pk=run.pk).update(
            state=Run.State.SUCCEEDED, finished_at=last or timezone.now()
        )
        if not run.imported:  # a past run's outcome is history, not news for the agents
            notify(run.fleet, "run.succeeded", {"run": run.key})


Facts = tuple[dict[str, rule.TaskNode], rule.World]

# Open halts and holds are found through their tasks' ids (one index probe each), not by joining
# on the run: on tables not yet analysed the planner scanned all the run's tasks once per hold,
# which made an answer in a run with 200 escalated tasks 25 ms slower. Each kind's rows come
# back as one JSON array (`json_agg`): psycopg parsing one document per kind, not one per row,
# takes half as long to hand a run of 400 tasks back. `{...}` say which tasks: every task of
# the runs (`WHOLE`), or a region of them (`AROUND`, see `facts_for`).
FACTS_SQL = """
{region}
SELECT kind, owner, json_agg(row) FROM (
SELECT 't', t.run_id, json_build_array(t.id, t.key, t.state, t.capabilities, t.reads_state_of,
    t.effect, t.dependency_confidence, t."transaction", t.consumes, t.consumes_declared, t.checks,
    t.weight, t.released)
  FROM runs_task t WHERE {tasks}
UNION ALL
SELECT 'p', t.run_id, json_build_array(p.task_id, p.id, r.key)
  {edges}
UNION ALL
SELECT 'h', t.run_id, json_build_array(h.task_id, h.id, h.key)
  FROM runs_halt h JOIN runs_task t ON t.id = h.task_id
  WHERE h.task_id = ANY({ids}) AND h.settled_at IS NULL
UNION ALL
SELECT 'o', t.run_id, json_build_array(t.key, o.code, extract(epoch FROM o.placed_at), o.id)
  FROM runs_hold o JOIN runs_task t ON t.id = o.task_id
  WHERE o.task_id = ANY({ids}) AND o.lifted_at IS NULL
UNION ALL
SELECT 'c', c.run_id, json_build_array(c.key, c.status, c.load_bearing, t.key, c.superseded,
    c.task_id)
  {claims}
UNION ALL
SELECT 'f', f.fleet_id, json_build_array(f.name, f.status, f.role)
  FROM fleet_capability f WHERE f.fleet_id = ANY(%(fleets)s)
UNION ALL
SELECT 'u', f.id, json_build_array(f.unnamed_roles_stop) FROM fleet_fleet f WHERE f.id = ANY(%(fleets)s)
UNION ALL
SELECT 'd', d.task_id, json_build_array(extract(epoch FROM d.created_at), d.id, d.ground_truth,
    d.scope, d.acted_at IS NULL)
  FROM runs_decision d WHERE d.task_id = ANY(%(decided)s)
UNION ALL
(SELECT DISTINCT ON (a.task_id) 'a', a.task_id, json_build_array(a.id, a.number)
  FROM runs_attempt a WHERE a.task_id = ANY(%(decided)s) ORDER BY a.task_id, a.number DESC)
) AS facts(kind, owner, row) GROUP BY kind, owner
"""
WHOLE = FACTS_SQL.format(
    region="",
    tasks="t.run_id = ANY(%(runs)s)",
    edges="""FROM runs_prerequisite p JOIN runs_task t ON t.id = p.task_id
    JOIN runs_task r ON r.id = p.requires_id
  WHERE t.run_id = ANY(%(runs)s)""",
    ids="ARRAY(SELECT id FROM runs_task WHERE run_id = ANY(%(runs)s))",
    claims="FROM runs_claim c JOIN runs_task t ON t.id = c.task_id WHERE c.run_id = ANY(%(runs)s)",
)
# `release.region` of the tasks `%(around)s`: every task below them, then, closed over both,
# what they depend on and their transaction groups' members. Its claims: those its tasks post,
# name in `consumes` or are halted on, and the keys `%(keys)s` asked for by name. Every row is
# found by a probe of an index for each id or name (a LATERAL subquery fenced by OFFSET 0 or
# LIMIT, which the planner cannot turn into a join): with a list to filter by, a planner whose
# statistics predate a run's growth read all its tasks and claims to find the region's, and the
# more claims a run had, the longer each answer took.
AROUND = FACTS_SQL.format(
    region="""
WITH RECURSIVE below(id) AS (
    SELECT unnest(%(around)s::bigint[])
  UNION
    SELECT n.task_id FROM below b CROSS JOIN LATERAL (
        SELECT task_id FROM runs_prerequisite WHERE requires_id = b.id OFFSET 0) AS n
), region(id) AS (
    SELECT id FROM below
  UNION
    SELECT near.id FROM region x CROSS JOIN LATERAL (
        SELECT p.requires_id FROM runs_prerequisite p WHERE p.task_id = x.id
      UNION ALL
        SELECT g.id FROM runs_task m CROSS JOIN LATERAL (
            SELECT id FROM runs_task WHERE run_id = m.run_id AND "transaction" = m."transaction"
              AND "transaction" <> '' OFFSET 0) AS g
          WHERE m.id = x.id AND m."transaction" <> ''
    ) AS near(id)
)""",
    tasks="t.id = ANY(ARRAY(SELECT id FROM region))",
    edges="""FROM runs_prerequisite p
    CROSS JOIN LATERAL (SELECT run_id FROM runs_task WHERE id = p.task_id OFFSET 0) AS t
    CROSS JOIN LATERAL (SELECT key FROM runs_task WHERE id = p.requires_id OFFSET 0) AS r
  WHERE p.task_id = ANY(ARRAY(SELECT id FROM region))""",
    ids="ARRAY(SELECT id FROM region)",
    claims="""FROM (
      SELECT k.* FROM region x CROSS JOIN LATERAL (
          SELECT id, run_id, key, status, load_bearing, superseded, task_id FROM runs_claim
            WHERE task_id = x.id OFFSET 0) AS k
    UNION
      SELECT k.* FROM unnest(%(runs)s::bigint[]) AS w(run) CROSS JOIN (
          SELECT jsonb_array_elements_text(n.consumes) FROM runs_task n
            WHERE n.id = ANY(ARRAY(SELECT id FROM region))
        UNION
          SELECT n.key FROM runs_halt n
            WHERE n.task_id = ANY(ARRAY(SELECT id FROM region)) AND n.settled_at IS NULL
        UNION
          SELECT unnest(%(keys)s::text[])
      ) AS named(key) CROSS JOIN LATERAL (
          SELECT id, run_id, key, status, load_bearing, superseded, task_id FROM runs_claim
            WHERE run_id = w.run AND key = named.key LIMIT 1) AS k
  ) AS c CROSS JOIN LATERAL (SELECT key FROM runs_task WHERE id = c.task_id OFFSET 0) AS t""",
)


@dataclass
class History:
    """What a task's next decision reads of its past: its decisions, oldest first (ground
    truth and scope each), whether one still waits to be acted on, its latest attempt, and
    whether it posted a load-bearing claim that was refuted."""

    decisions: list[tuple[list[Any], str]] = field(default_factory=list)
    unsettled: bool = False
    attempt: tuple[int, int] | None = None  # (id, number)
    refuted: bool = False


Decided = dict[int, History]  # task id -> its history


def facts_for(
    runs: Sequence[Run],
    *,
    decided: Decided | None = None,
    around: Collection[int] = (),
    keys: Sequence[str] = (),
) -> dict[int, Facts]:
    """Each run's tasks and world as the frontier rule sees them (`nodes_for`, `world_for`):
    on PostgreSQL in one statement for all the runs, elsewhere run by run. `decided`, keyed by
    task ids, is filled with those tasks' decisions (read with the rest).

    `around` (task ids) asks only for the frontier of those tasks and of the work below them:
    on PostgreSQL just their region is read (`release.region`: the tasks whose facts decide
    theirs), with the claims its tasks post, consume or are halted on, and those named `keys`
    (which may be anywhere in the run). The frontier of every task read is the run's own. A
    run under a global halt is read whole: whether it halts depends on every task."""
    decided = {} if decided is None else decided
    if connection.vendor != "postgresql":
        ids = list(decided)
        rows_of = Decision.objects.filter(task__in=ids).order_by("created_at", "id")
        for task_id, truth, scope, acted in rows_of.values_list(
            "task_id", "ground_truth", "scope", "acted_at"
        ):
            decided[task_id].decisions.append((truth, scope))
            decided[task_id].unsettled |= acted is None
        for task_id, pk, number in (
            Attempt.objects.filter(task__in=ids)
            .order_by("task_id", "number")
            .values_list("task_id", "pk", "number")
        ):
            decided[task_id].attempt = (pk, number)
        for task_id in Claim.objects.filter(
            task__in=ids, status=Claim.Status.REFUTED, load_bearing=True
        ).values_list("task_id", flat=True):
            decided[task_id].refuted = True
        return {run.pk: (nodes_for(run), world_for(run)) for run in runs}
    rows: dict[tuple[str, int], list[list[Any]]] = {}
    params: dict[str, Any] = {
        "runs": sorted({r.pk for r in runs}),
        "fleets": sorted({r.fleet_id for r in runs}),
        "decided": sorted(decided),
    }
    # A region (an answer's) is a few index probes whatever the run's size, planned once per
    # connection (`fleet.prepared`); a whole run is planned for its size each time.
    cursor_for: Callable[[], AbstractContextManager[Any]]
    if around and all(r.policy != Run.Policy.GLOBAL_HALT for r in runs):
        statement, cursor_for = AROUND, prepared_cursor
        params |= {"around": sorted(around), "keys": list(keys)}
    else:
        statement, cursor_for = WHOLE, connection.cursor
    with cursor_for() as cursor:
        cursor.execute(statement, params)
        for kind, owner, values in cursor.fetchall():
            rows[(kind, owner)] = json.loads(values) if isinstance(values, str) else values
    for task_id, history in decided.items():
        for _, _, truth, scope, waits in sorted(rows.get(("d", task_id), []), key=lambda r: r[:2]):
            history.decisions.append((truth, scope))
            history.unsettled |= waits
        for pk, number in rows.get(("a", task_id), []):
            history.attempt = (pk, number)
    for run in runs:
        for _, status, load_bearing, _, _, task_id in rows.get(("c", run.pk), []):
            if task_id in decided and status == Claim.Status.REFUTED and load_bearing:
                decided[task_id].refuted = True
    facts = {}
    for run in runs:
        edges: dict[int, list[str]] = {}
        for task_id, _, key in sorted(rows.get(("p", run.pk), []), key=lambda r: (r[0], r[1])):
            edges.setdefault(task_id, []).append(key)
        halted: dict[int, list[str]] = {}
        for task_id, _, claim in rows.get(("h", run.pk), []):
            halted.setdefault(task_id, []).append(claim)
        nodes = {}
        for row in sorted(rows.get(("t", run.pk), []), key=lambda r: r[0]):
            (pk, key, state, capabilities, reads, effect, confidence, group, consumes,
             declared, checks, weight, released) = row  # fmt: skip
            nodes[key] = rule.TaskNode(
                key=key,
                state=state,
                prerequisites=tuple(edges.get(pk, ())),
                capabilities=tuple(capabilities),
                reads_state_of=tuple(reads),
                effect=effect,
                dependency_confidence=confidence,
                transaction=group or None,
                consumes=tuple(dict.fromkeys(consumes)),
                weight=weight,
                released=released,
                implicit=not declared,
                checks=tuple(checks),
                halted_on=tuple(sorted(halted.get(pk, ()))),
            )
        held: dict[str, list[str]] = {}
        for key, code, _, _ in sorted(rows.get(("o", run.pk), []), key=lambda r: (r[2], r[3])):
            held.setdefault(key, []).append(code)
        world = world_of(
            run,
            capabilities=rows.get(("f", run.fleet_id), []),
            claims=rows.get(("c", run.pk), []),
            held=held,
            stop_unnamed_roles=rows[("u", run.fleet_id)][0][0],
        )
        facts[run.pk] = (nodes, world)
    return facts


def change(run: Run, keys: Iterable[str]) -> FrontierChange:
    """What `mark_changed` stores, unsaved, for a caller that writes it with its other writes
    and then asks for the recompute (`recompute_runs_after_commit`)."""
    return FrontierChange(run=run, keys=sorted(set(keys)), capability="", claims=[], may_hold=True)


def recompute_runs_after_commit(run_ids: Iterable[int]) -> None:
    for run_id in run_ids:
        recompute_after_commit(run_id)
