"""Why a `task.started` may not start as sent: the decision before it ignored, a capability it
must re-read, and the reasons shown beside the frontier's blockers. Reads only; the gate itself
is `runs.task_state.task_start`."""

from collections.abc import Sequence

from fleet.errors import ErrorItem, Refusal, error
from fleet.models import Agent, Capability
from runs.frontier import ROLES
from runs.models import Decision, Run, Task
from runs.policy import TOOL

STOP = "barrier:uncertain-dependency"


def refuse_ignored(task: Task, number: int, errors: list[ErrorItem]) -> None:
    if errors:
        raise Refusal(
            [error("data.task", f"task {task.key!r} attempt {number} may not start as sent")]
            + errors,
            status=409,
        )


def must_change(decision: Decision | None) -> list[str]:
    """What the attempt after `decision` must change: after a reframe its prompt or its context
    (at least one of the two hashes), after a reroute its agent; nothing after anything else."""
    if decision is None:
        return []
    if decision.action == Decision.Action.REFRAME:
        return ["prompt_hash", "context_hash"]
    if decision.action == Decision.Action.REROUTE:
        return ["agent"]
    return []


def ignored_decision(
    task: Task,
    number: int,
    decision: Decision | None,
    *,
    actor: Agent,
    hashes: tuple[str, str] | None = None,
) -> list[ErrorItem]:
    """Why attempt `number` ignores the decision before it (nothing if it does not).

    The policy counts an attempt as reframed or rerouted; it must be, not only say so.
    """
    needs = must_change(decision)
    if decision is None or not needs:
        return []
    named = f"decision {decision.pk} ({decision.action})"
    if "agent" in needs:
        chosen = decision.reroute_to.removeprefix(TOOL)
        if chosen and actor.name != chosen:
            return [
                error(
                    "data.agent",
                    f"{named} handed task {task.key!r} to {chosen}: attempt {number} is "
                    f"{chosen}'s to start, not {actor.name}'s",
                )
            ]
    before = decision.attempt
    if (
        hashes is not None
        and "prompt_hash" in needs
        and before is not None
        and (before.prompt_hash, before.context_hash) == hashes
    ):
        return [
            error(
                "data.attempt",
                f"{named} reframed task {task.key!r}, but attempt {number} reports the same "
                f"prompt_hash and context_hash as attempt {before.number}: give it the "
                "decision's ground truth and scope (GET the task's context), so that its "
                "prompt or its context changes",
            )
        ]
    return []


def refresh_errors(task: Task, refreshed: Sequence[str]) -> list[ErrorItem]:
    missing = [name for name in task.refresh if name not in refreshed]
    listed = ", ".join(f'"{name}"' for name in task.refresh)
    return [
        error(
            "data.refreshed",
            f"{name} came back after being down, and task {task.key!r} reads its state: re-read "
            f"it, then start with refreshed: [{listed}]",
        )
        for name in missing
    ]


def capability_blocker_errors(run: Run, task: Task, blockers: Sequence[str]) -> list[ErrorItem]:
    """Why each `capability:<name>` blocks (down, and why; or unknown), and why a stop holds."""
    names = [b.removeprefix("capability:") for b in blockers if b.startswith("capability:")]
    found = {c.name: c for c in Capability.objects.filter(fleet_id=run.fleet_id, name__in=names)}
    errors = []
    for name in names:
        capability = found.get(name)
        if capability is None or capability.status == Capability.Status.UNKNOWN:
            msg = (
                f"{name} is unknown: nobody has reported on it, and an external effect waits "
                "until it is reported up"
            )
        else:
            why = f": {capability.reason}" if capability.reason else ""
            msg = f"{name} is {capability.status}{why}"
        errors.append(error(f"capabilities.{name}", msg))
    if "barrier:freshness" in blockers:
        down = sorted(
            Capability.objects.filter(
                fleet_id=run.fleet_id,
                name__in=list(task.reads_state_of),
                status=Capability.Status.DOWN,
            ).values_list("name", flat=True)
        )
        errors.append(
            error(
                "barriers.freshness",
                f"{task.key} reads the state of {', '.join(down) or 'a capability'}, which is "
                "down: what it would read is stale; it starts once that is back (and re-read)",
            )
        )
    if STOP in blockers and task.dependency_confidence != Task.Confidence.UNCERTAIN:
        named = set(
            Capability.objects.filter(fleet_id=run.fleet_id)
            .exclude(role="")
            .values_list("role", flat=True)
        )
        unnamed = [role for role in ROLES if role not in named]
        errors.append(
            error(
                "barriers.uncertain-dependency",
                f"the fleet names no {either(unnamed)} capability, and it holds every "
                "external effect at a stop until a reviewer releases it",
            )
        )
    return errors


def either(words: Sequence[str]) -> str:
    """'a', 'a or b', 'a, b or c'."""
    return " or ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)
