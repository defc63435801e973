"""Writes of the work, one transaction each: the graph, attempts, claims, outcomes."""

import hashlib
import json
from collections.abc import Collection, Sequence
from typing import Any

from django.db import connection
from django.db.models import Count, Max

from fleet.errors import Refusal, error
from fleet.events import (
    ClaimChecked,
    ClaimPosted,
    EvidenceIn,
    Partial,
    RunStarted,
    TaskEntry,
    TaskFinished,
    TaskIn,
    TasksAdded,
    TaskStarted,
)
from fleet.intake import Context
from fleet.models import Agent, Capability
from runs import scheduler
from runs.graph import check_graph
from runs.models import (
    Artifact,
    Attempt,
    Claim,
    ClaimUse,
    Evidence,
    Prerequisite,
    Run,
    Task,
)


def graph_digest(tasks: Sequence[TaskIn]) -> str:
    """The declared graph, whatever the order of its tasks and lists (they are sets)."""
    specs = []
    for task in sorted(tasks, key=lambda t: t.key):
        spec = task.model_dump()
        for name in ("prerequisites", "capabilities", "reads_state_of", "consumes"):
            spec[name] = sorted(set(spec[name]))
        specs.append(spec)
    canonical = json.dumps(specs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def stored_task_spec(task: Task, prerequisites: list[str], agent_name: str) -> TaskIn:
    return TaskIn(
        key=task.key,
        title=task.title,
        agent=agent_name,
        prerequisites=prerequisites,
        capabilities=task.capabilities,
        reads_state_of=task.reads_state_of,
        effect=task.effect,  # type: ignore[arg-type]
        dependency_confidence=task.dependency_confidence,  # type: ignore[arg-type]
        transaction=task.transaction or None,
        weight=task.weight,
        consumes=task.consumes,
    )


def run_for(context: Context, key: str, loc: str = "data.run", *, lock: bool = False) -> Run:
    runs = Run.objects.filter(fleet_id=context.sender.fleet_id, key=key)
    run = (runs.select_for_update() if lock else runs).first()
    if run is None:
        raise Refusal([error(loc, f"unknown run {key!r}")])
    return run


def find_task(run: Run, key: str, *, lock: bool = True) -> Task | None:
    tasks = Task.objects.filter(run=run, key=key).select_related("agent")
    return (tasks.select_for_update(of=("self",)) if lock else tasks).first()


def unknown_task(run: Run, key: str, loc: str = "data.task") -> dict[str, str]:
    return error(loc, f"unknown task {key!r} in run {run.key!r}")


def task_for(run: Run, key: str, loc: str = "data.task", *, lock: bool = True) -> Task:
    task = find_task(run, key, lock=lock)
    if task is None:
        raise Refusal([unknown_task(run, key, loc)])
    return task


def refuse_unless_own(context: Context, task: Task, loc: str = "data.task") -> None:
    """An agent acts only on its own tasks; an orchestrator acts for another by naming it.

    The task's agent as it is now: a reroute hands the task (and the right to act on it) over.
    An import records history as it happened: its file, not an agent, names who did what.
    """
    if context.imported or task.agent_id == context.actor.pk:
        return
    owner, actor = task.agent.name, context.actor.name
    hint = (
        f"; to act for {owner}, name it in data.agent"
        if context.sender.is_orchestrator
        else f"; only {owner} (or an orchestrator naming {owner} in data.agent) may act on it"
    )
    raise Refusal([error(loc, f"task {task.key!r} is {owner}'s, not {actor}'s{hint}")], status=403)


def task_errors(
    *, agents: Collection[str], existing: Collection[str], entries: Sequence[TaskEntry]
) -> list[dict[str, str]]:
    """Every reference error of declared tasks: unknown agents, and the graph's errors.

    A task that did not parse (None) counts by its key, if readable; its references are not checked.
    """
    errors = [
        error(f"data.tasks.{i}.agent", f"no agent {spec.agent!r} in this fleet")
        for i, spec, _ in entries
        if spec is not None and spec.agent not in agents
    ]
    readable = [
        (i, key, spec.prerequisites if spec is not None else None)
        for i, spec, key in entries
        if key is not None
    ]
    graph = check_graph(
        [(key, prerequisites) for _, key, prerequisites in readable],
        existing=dict.fromkeys(existing, ()),
        positions=[i for i, _, _ in readable],
    )
    return errors + [error(e.loc, e.msg) for e in graph]


def add_tasks(context: Context, run: Run, specs: Sequence[TaskIn]) -> list[Task]:
    """Validate new tasks against the run's graph and store them with their edges."""
    fleet_id = context.sender.fleet_id
    agents = {a.name: a for a in Agent.objects.filter(fleet_id=fleet_id)}
    existing: dict[str, int] = dict(Task.objects.filter(run=run).values_list("key", "pk"))
    errors = task_errors(
        agents=agents,
        existing=existing,
        entries=[(i, spec, spec.key) for i, spec in enumerate(specs)],
    )
    if errors:
        raise Refusal(errors)
    known = set(Capability.objects.filter(fleet_id=fleet_id).values_list("name", flat=True))
    needed = {name for s in specs for name in (*s.capabilities, *s.reads_state_of)} - known
    Capability.objects.bulk_create(
        [
            Capability(fleet_id=fleet_id, name=name, changed_at=context.at)
            for name in sorted(needed)
        ],
        ignore_conflicts=True,
    )
    start = (Task.objects.filter(run=run).aggregate(m=Max("position"))["m"] or 0) + 1
    tasks = Task.objects.bulk_create(
        [
            Task(
                run=run,
                key=s.key,
                title=s.title,
                agent=agents[s.agent],
                position=start + i,
                capabilities=list(s.capabilities),
                reads_state_of=list(s.reads_state_of),
                effect=s.effect,
                dependency_confidence=s.dependency_confidence,
                transaction=s.transaction or "",
                weight=s.weight,
                consumes=list(s.consumes),
                created_at=context.at,
            )
            for i, s in enumerate(specs)
        ]
    )
    ids = existing | {t.key: t.pk for t in tasks}
    if any(t.pk is None for t in tasks):  # backends that do not return ids from bulk inserts
        ids = dict(Task.objects.filter(run=run).values_list("key", "pk"))
    Prerequisite.objects.bulk_create(
        [
            Prerequisite(task_id=ids[s.key], requires_id=ids[p])
            for s in specs
            for p in dict.fromkeys(s.prerequisites)
        ],
        batch_size=2000,
    )
    return tasks


def reference_errors(*, fleet_id: int, partial: Partial) -> list[dict[str, str]]:
    """The reference errors of a refused event's valid parts, named with its schema errors.

    Read-only. Only fields that parsed are looked up: the run, the task, the claim a check names,
    and the declared tasks (their agents, duplicate keys, unknown prerequisites, a cycle).
    """
    fields = partial.fields
    errors: list[dict[str, str]] = []
    run: Run | None = None
    run_key, task_key, claim_key = fields.get("run"), fields.get("task"), fields.get("claim")
    if partial.type != "run.started" and isinstance(run_key, str):
        run = Run.objects.filter(fleet_id=fleet_id, key=run_key).first()
        if run is None:
            errors.append(error("data.run", f"unknown run {run_key!r}"))
    if (
        run is not None
        and isinstance(task_key, str)
        and not Task.objects.filter(run=run, key=task_key).exists()
    ):
        errors.append(unknown_task(run, task_key))
    if (
        run is not None
        and partial.type == "claim.checked"
        and isinstance(claim_key, str)
        and not Claim.objects.filter(run=run, key=claim_key).exists()
    ):
        errors.append(error("data.claim", f"unknown claim {claim_key!r} in run {run.key!r}"))
    if partial.tasks:
        entries = partial.tasks
        if partial.type == "tasks.added" and run is None:
            # Without the run's graph, only the agents can be checked.
            entries = tuple((i, spec, None) for i, spec, _ in entries)
        existing = Task.objects.filter(run=run).values_list("key", flat=True) if run else ()
        errors += task_errors(
            agents=set(Agent.objects.filter(fleet_id=fleet_id).values_list("name", flat=True)),
            existing=set(existing),
            entries=entries,
        )
    return errors


def run_start(context: Context, data: RunStarted) -> dict[str, Any]:
    existing = Run.objects.filter(fleet_id=context.sender.fleet_id, key=data.run).first()
    if existing is not None:
        declared = existing.declaration or stored_digest(existing)
        if declared == graph_digest(data.tasks):
            return {"run": existing.key, "created": False}
        raise Refusal(
            [error("data.tasks", f"run {data.run!r} was already declared with other tasks")], 409
        )
    run = Run.objects.create(
        fleet_id=context.sender.fleet_id,
        key=data.run,
        title=data.title,
        policy=data.policy,
        started_by=context.actor,
        started_at=context.at,
        imported=context.imported,
        declaration=graph_digest(data.tasks),
    )
    add_tasks(context, run, data.tasks)
    scheduler.mark_changed(run, [t.key for t in data.tasks])
    return {"run": run.key, "created": True, "tasks": len(data.tasks)}


def stored_digest(run: Run) -> str:
    tasks = list(Task.objects.filter(run=run).select_related("agent").order_by("position"))
    edges: dict[int, list[str]] = {}
    for task_id, key in Prerequisite.objects.filter(task__run=run).values_list(
        "task_id", "requires__key"
    ):
        edges.setdefault(task_id, []).append(key)
    return graph_digest([stored_task_spec(t, edges.get(t.pk, []), t.agent.name) for t in tasks])


def tasks_add(context: Context, data: TasksAdded) -> dict[str, Any]:
    run = run_for(context, data.run, lock=True)  # the graph grows one declaration at a time
    if run.state != Run.State.RUNNING and not context.imported:
        raise Refusal(
            [error("data.run", f"run {run.key!r} has {run.state}; no task can be added to it")],
            status=409,
        )
    add_tasks(context, run, data.tasks)
    scheduler.mark_changed(run, [t.key for t in data.tasks])
    return {"run": run.key, "tasks": len(data.tasks)}


def record_uses(task: Task, keys: Sequence[str], at: Any) -> None:
    claims = Claim.objects.filter(run_id=task.run_id, key__in=list(keys))
    ClaimUse.objects.bulk_create(
        [ClaimUse(claim=c, task=task, at=at) for c in claims], ignore_conflicts=True
    )


def task_start(context: Context, data: TaskStarted) -> dict[str, Any]:
    run = run_for(context, data.run)
    task = task_for(run, data.task)
    refuse_unless_own(context, task)
    if task.state != Task.State.PENDING:
        raise Refusal(
            [error("data.task", f"task {task.key!r} is {task.state}, not pending")], status=409
        )
    consumes = list(dict.fromkeys([*task.consumes, *data.consumes]))
    if not context.imported and run.state != Run.State.RUNNING:
        # A run that is over starts nothing more: its frontier is empty whatever the tasks allow.
        raise Refusal(
            [error("data.run", f"run {run.key!r} has {run.state}; it starts nothing more")]
            + [error("blockers", f"run:{run.state}")],
            status=409,
        )
    if not context.imported:
        blockers = scheduler.blockers_of(run, task, extra_consumes=data.consumes)
        if blockers:
            raise Refusal(
                [error("data.task", f"task {task.key!r} is not in the safe ready frontier")]
                + [error("blockers", b) for b in blockers]
                + claim_blocker_errors(run, blockers),
                status=409,
            )
    number = (task.attempts.aggregate(n=Max("number"))["n"] or 0) + 1
    attempt = Attempt.objects.create(
        task=task,
        number=number,
        agent=context.actor,
        prompt_hash=data.attempt.prompt_hash,
        context_hash=data.attempt.context_hash,
        started_at=context.at,
        **scheduler.attempt_flags(task, number),
    )
    task.state = Task.State.RUNNING
    task.ready = False
    task.started_at = task.started_at or context.at
    task.save(update_fields=["state", "ready", "started_at"])
    record_uses(task, consumes, context.at)
    scheduler.mark_changed(run, [task.key])
    return {"run": run.key, "task": task.key, "attempt": attempt.number}


def claim_blocker_errors(run: Run, blockers: Sequence[str]) -> list[dict[str, str]]:
    """Why each `claim:<key>` blocks: unverified (and why), refuted, or never posted."""
    keys = [b.removeprefix("claim:") for b in blockers if b.startswith("claim:")]
    found = {
        c.key: c
        for c in Claim.objects.filter(run=run, key__in=keys).only("key", "status", "status_reason")
    }
    errors = []
    for key in keys:
        claim = found.get(key)
        if claim is None:
            msg = f"{key} has not been posted in run {run.key!r}"
        elif claim.status == Claim.Status.REFUTED:
            msg = (
                f"{key} is refuted: {claim.status_reason}"
                if claim.status_reason
                else f"{key} is refuted"
            )
        else:
            why = f": {claim.status_reason}" if claim.status_reason else ""
            msg = f"{key} is {claim.status}, and a task starts only on verified claims{why}"
        errors.append(error(f"claims.{key}", msg))
    return errors


def evidence_row(claim: Claim, evidence: EvidenceIn, *, role: str, by: str, at: Any) -> Evidence:
    return Evidence.objects.create(
        claim=claim,
        role=role,
        kind=evidence.kind,
        source=evidence.source,
        payload_hash=evidence.payload_hash,
        payload=evidence.payload,
        datasource=evidence.datasource or "",
        workspace=evidence.workspace or "",
        submitted_by=by,
        created_at=at,
    )


AGENT_TEXT = "another agent's text is not evidence"


def cites_an_agent(source: str) -> bool:
    """Evidence pointing at another agent's output: never checked, never a verdict's basis."""
    return source.lstrip().lower().startswith("agent:")


def posted_reason(evidence: EvidenceIn | None, *, imported: bool) -> str:
    if evidence is None:
        return "posted without evidence"
    if cites_an_agent(evidence.source):
        return AGENT_TEXT
    if imported:
        return "imported: its evidence is recorded as posted, not re-checked"
    return "waiting for a verifier"


def claim_post(context: Context, data: ClaimPosted) -> dict[str, Any]:
    run = run_for(context, data.run)
    task = task_for(run, data.task, lock=False)  # posting a claim does not change the task
    refuse_unless_own(context, task)
    if Claim.objects.filter(run=run, key=data.claim.key).exists():
        raise Refusal(
            [error("data.claim.key", f"claim {data.claim.key!r} was already posted")], 409
        )
    evidence = data.claim.evidence
    reason = posted_reason(evidence, imported=context.imported)
    checkable = evidence is not None and not cites_an_agent(evidence.source)
    claim = Claim.objects.create(
        run=run,
        task=task,
        key=data.claim.key,
        statement=data.claim.statement,
        load_bearing=data.claim.load_bearing,
        posted_at=context.at,
        status_reason=reason,
        # An imported claim is history: what checked it, if anything, is in the file.
        verification_pending=checkable and not context.imported,
    )
    if evidence is not None:
        row = evidence_row(
            claim, evidence, role="posted", by=f"agent:{context.actor.name}", at=context.at
        )
        if not checkable:
            row.verdict, row.verdict_reason = Claim.Status.UNVERIFIED, AGENT_TEXT
            row.save(update_fields=["verdict", "verdict_reason"])
    consumers = declared_consumers(run, claim.key)
    # Tasks already running that declared this claim consumed it from its first moment.
    ClaimUse.objects.bulk_create(
        [
            ClaimUse(claim=claim, task_id=pk, at=context.at)
            for pk, _, state in consumers
            if state == Task.State.RUNNING and pk != task.pk
        ],
        ignore_conflicts=True,
    )
    if claim.verification_pending:
        scheduler.verify_after_commit(claim)
    scheduler.mark_changed(run, [key for _, key, _ in consumers])
    return {"run": run.key, "claim": claim.key, "status": claim.status, "reason": reason}


def declared_consumers(run: Run, key: str) -> list[tuple[int, str, str]]:
    """(id, key, state) of the run's tasks that declare they consume claim `key`."""
    tasks = Task.objects.filter(run=run)
    if connection.vendor == "postgresql":  # jsonb containment, filtered in the database
        rows = tasks.filter(consumes__contains=[key]).values_list("pk", "key", "state")
        return list(rows)
    every = tasks.values_list("pk", "key", "state", "consumes")
    return [(pk, k, state) for pk, k, state, consumes in every if key in consumes]


def consumers_of(run: Run, key: str) -> list[str]:
    return [k for _, k, _ in declared_consumers(run, key)]


def record_checker_use(claim: Claim, task: Task, at: Any) -> None:
    """The checker read the claim to check it: from when it had both its task and the claim."""
    if task.pk == claim.task_id:
        return
    since = max(task.started_at, claim.posted_at) if task.started_at else at
    ClaimUse.objects.get_or_create(claim=claim, task=task, defaults={"at": since})


def claim_check(context: Context, data: ClaimChecked) -> dict[str, Any]:
    """A consumer's verdict: recorded now, accepted only once the verifier confirms its evidence."""
    run = run_for(context, data.run)
    task = find_task(run, data.task)
    if task is not None:
        refuse_unless_own(context, task)  # the checking task: the consumer's
    claim = Claim.objects.select_for_update().filter(run=run, key=data.claim).first()
    agent_text = cites_an_agent(data.evidence.source)
    errors = [] if task is not None else [unknown_task(run, data.task)]
    if claim is None:
        errors.append(error("data.claim", f"unknown claim {data.claim!r} in run {run.key!r}"))
    if agent_text and not context.imported:
        errors.append(
            error(
                "data.evidence.source",
                "another agent's text is not evidence: cite a query, a file, a test run or an HTTP exchange",
            )
        )
    if errors:
        raise Refusal(errors)
    assert task is not None and claim is not None
    checker = f"agent:{context.actor.name}"
    row = evidence_row(claim, data.evidence, role="check", by=checker, at=context.at)
    row.verdict = data.verdict  # the checker's verdict; the verifier's judgement goes in the reason
    record_checker_use(claim, task, context.at)
    if context.imported:
        return record_imported_check(context, run, claim, row, agent_text)
    row.save(update_fields=["verdict"])
    claim.verification_pending = True
    claim.save(update_fields=["verification_pending"])
    scheduler.verify_after_commit(claim)
    return {
        "run": run.key,
        "claim": claim.key,
        "status": claim.status,
        "verdict": "pending verification",
    }


def record_imported_check(
    context: Context, run: Run, claim: Claim, row: Evidence, agent_text: bool
) -> dict[str, Any]:
    """A past run's verdict is recorded as it happened, at its time: it is not re-checked now."""
    accepted = not agent_text and not claim.checked_by.startswith("reviewer:")
    row.verdict_reason = (
        "accepted: imported, recorded as it happened"
        if accepted
        else "not accepted: " + (AGENT_TEXT if agent_text else "a reviewer checked it by hand")
    )
    row.save(update_fields=["verdict", "verdict_reason"])
    if accepted and claim.status != row.verdict:
        claim.status = row.verdict
        claim.checked_at = claim.checked_at or max(context.at, claim.posted_at)
        claim.checked_by = row.submitted_by
        claim.status_reason = f"{row.verdict} by {row.submitted_by} (imported)"
        claim.save(update_fields=["status", "checked_at", "checked_by", "status_reason"])
        scheduler.mark_changed(run, consumers_of(run, claim.key))
    return {"run": run.key, "claim": claim.key, "status": claim.status, "verdict": row.verdict}


def task_finish(context: Context, data: TaskFinished) -> dict[str, Any]:
    run = run_for(context, data.run)
    task = task_for(run, data.task)
    refuse_unless_own(context, task)
    if task.state != Task.State.RUNNING and not context.imported:
        raise Refusal([error("data.task", f"task {task.key!r} is {task.state}, not running")], 409)
    attempt = task.attempts.order_by("-number").first()
    if attempt is not None and attempt.outcome and not context.imported:
        # It finished and waits for the policy's word on the background work it left running.
        raise Refusal(
            [error("data.task", f"task {task.key!r} attempt {attempt.number} has finished")], 409
        )
    if attempt is None:
        if not context.imported:
            raise Refusal([error("data.task", f"task {task.key!r} has no attempt")], 409)
        attempt = Attempt.objects.create(
            task=task,
            number=1,
            agent=context.actor,
            prompt_hash="",
            context_hash="",
            started_at=context.at,
        )
    attempt.finished_at = context.at
    attempt.outcome = data.outcome
    attempt.background_killed = [k.task for k in data.background_killed]
    attempt.resumable = data.resumable
    if data.failure is not None:
        attempt.failure_kind = data.failure.kind
        attempt.failure_signature = data.failure.signature
        attempt.failure_message = data.failure.message
        attempt.failure_capability = data.failure.capability or ""
    attempt.save()
    Artifact.objects.bulk_create(
        [
            Artifact(task=task, kind=a.kind, ref=a.ref, url=a.url or "", created_at=context.at)
            for a in data.artifacts
        ]
    )
    if data.outcome == "failed":
        task.state = Task.State.FAILED
    elif data.background_killed and not context.imported:
        # It may be resumed: its success stands, and releases what follows, once the policy says.
        task.state = Task.State.RUNNING
    else:
        task.state = Task.State.SUCCEEDED
    task.ready = False  # an imported finish may come without a start
    task.finished_at = context.at if task.state != Task.State.RUNNING else None
    task.save(update_fields=["state", "ready", "finished_at"])
    scheduler.after_finish(run, task, attempt, imported=context.imported)
    return {"run": run.key, "task": task.key, "state": task.state}


def run_counts(run: Run) -> dict[str, int]:
    return dict(Task.objects.filter(run=run).values_list("state").annotate(n=Count("id")))  # type: ignore[arg-type]
