"""The retry policy: what happens after a failed attempt, and after killed background work. Pure.

`decide` applies DESIGN section 6 in order: a transient failure is retried with the same context
and a backoff, within the task's and the fleet's retry budget (repeated transient failures naming
one capability trip its circuit breaker); then the signal rule; then reframe; then reroute; then
escalate. Nothing else ever retries with the same context: re-running a reasoning, spec,
environment or error failure as it was is another vote, not a retry.

`after_background_kill` handles an attempt that ended with background work still running, which
was killed: one Resume with the same context, then a progress line and carrying on, and
`failure_cause` names that killed work ahead of a later failure's cause.

How a caller composes them after an attempt that failed or left killed background work:
`after_background_kill` first. "resume" is the decision (a failure the attempt reported waits for
the Resume's own outcome). "carry_on" records the progress line and the attempt's outcome stands:
a succeeded attempt stays succeeded, and a failed one goes on to `decide`. "none" goes straight
to `decide` if the attempt failed.

No clock, no global randomness, no I/O: the caller passes `now` and a `random.Random` (or a seed).
"""

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Final

FAILURE_KINDS: Final = ("transient", "reasoning", "spec", "environment", "error")
OUTCOMES: Final = ("succeeded", "failed")
ACTIONS: Final = ("retry", "reframe", "reroute", "escalate", "resume", "abort")
BACKGROUND_ACTIONS: Final = ("resume", "carry_on", "none")
TOOL: Final = "tool:"

# A long failure message is cut to this many characters in the reframe's scope sentence.
SCOPE_MESSAGE_CHARS: Final = 200
# 2**64 times any sane base delay is past any sane cap; a larger exponent would overflow a float.
MAX_EXPONENT: Final = 64


@dataclass(frozen=True, slots=True)
class Failure:
    kind: str  # one of FAILURE_KINDS
    signature: str  # the agent's stable name for how it failed; equal means "the same way"
    message: str = ""  # what the agent said about it, for the reviewer
    capability: str | None = None  # the capability a transient failure names (feeds the breaker)

    def __post_init__(self) -> None:
        if self.kind not in FAILURE_KINDS:
            raise ValueError(f"unknown failure kind {self.kind!r}")


@dataclass(frozen=True, slots=True)
class AttemptView:
    number: int  # 1 for the task's first attempt
    agent: str  # who ran it: an agent's name, or "tool:<name>" for a deterministic tool
    prompt_hash: str  # the attempt's prompt, as reported in task.started
    context_hash: str  # the context it was given, as reported in task.started
    outcome: str | None  # "succeeded" | "failed" | None (running)
    failure: Failure | None = None  # what a failed attempt reported
    reframed: bool = False  # this attempt was a reframe (ground truth and a narrower scope)
    rerouted: bool = False  # this attempt was a reroute (another agent or a tool)
    resumed: bool = False  # this attempt was the Resume of the attempt before it
    background_killed: tuple[str, ...] = ()  # task names of background work that was killed
    resumable: bool = False  # its session can be resumed (the agent said so in task.finished)

    def __post_init__(self) -> None:
        if self.outcome is not None and self.outcome not in OUTCOMES:
            raise ValueError(f"attempt {self.number}: unknown outcome {self.outcome!r}")


@dataclass(frozen=True, slots=True)
class RetryConfig:
    task_budget: int = 3  # same-context retries one task may have
    base_delay_s: float = 30  # the first retry's delay, before jitter
    max_delay_s: float = 3600  # cap on the exponential delay, before jitter
    jitter: float = 0.5  # up to this fraction of the delay is added on top, at random
    breaker_threshold: int = 3  # transient failures naming one capability that mark it down
    breaker_window_s: float = 600  # the window the caller counts those failures over

    def __post_init__(self) -> None:
        if self.task_budget < 0:
            raise ValueError("task_budget must not be negative")
        if not 0 < self.base_delay_s <= self.max_delay_s:
            raise ValueError("delays must satisfy 0 < base_delay_s <= max_delay_s")
        if self.jitter < 0:
            raise ValueError("jitter must not be negative")
        if self.breaker_threshold < 1:
            raise ValueError("breaker_threshold must be at least 1")
        if self.breaker_window_s <= 0:
            raise ValueError("breaker_window_s must be positive")


@dataclass(frozen=True, slots=True)
class Budget:
    task_retries_used: int  # same-context retries this task has had so far
    fleet_retries_used: int  # same-context retries the fleet has had in its budget period
    fleet_budget: int  # same-context retries the fleet may have in that period


@dataclass(frozen=True, slots=True)
class Decision:
    action: str  # one of ACTIONS
    reason: str  # shown on the run's timeline: the rule that fired and the facts
    not_before: datetime | None = None  # a retry starts no earlier than this
    ground_truth: tuple[Mapping[str, Any], ...] = ()  # a reframe: what the next attempt is told
    scope: str | None = None  # a reframe: the narrower scope, as one sentence
    reroute_to: str | None = None  # a reroute: an agent's name or "tool:<name>"
    trip_capability: str | None = None  # the circuit breaker tripped: mark this capability down

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown decision action {self.action!r}")


@dataclass(frozen=True, slots=True)
class BackgroundOutcome:
    action: str  # one of BACKGROUND_ACTIONS
    progress_line: str | None  # carry_on: the line the run records
    killed: tuple[str, ...]  # the killed background work, for the record and a later cause
    reason: str = ""  # shown on the run's timeline for a resume or carry_on decision

    def __post_init__(self) -> None:
        if self.action not in BACKGROUND_ACTIONS:
            raise ValueError(f"unknown background outcome {self.action!r}")


def backoff_delay(attempt_number: int, config: RetryConfig, rng: random.Random | int) -> float:
    """Seconds to wait before retry number `attempt_number` (1 for the first retry).

    The base delay doubles per retry up to max_delay_s; jitter then adds up to that fraction on
    top, so that retries released by one outage do not all arrive at once. The result lies in
    [base_delay_s, max_delay_s * (1 + jitter)).
    """
    if attempt_number < 1:
        raise ValueError("attempt_number starts at 1")
    exponent = min(attempt_number - 1, MAX_EXPONENT)
    delay = min(config.max_delay_s, config.base_delay_s * 2.0**exponent)
    return delay * (1 + config.jitter * _random(rng).random())


def decide(
    *,
    attempts: Sequence[AttemptView],
    ground_truth: Sequence[Mapping[str, Any]],
    budget: Budget,
    config: RetryConfig,
    alternatives: Sequence[str],
    tools: Sequence[str],
    recent_capability_failures: int,
    now: datetime,
    rng: random.Random | int,
    tool: str | None = None,
) -> Decision:
    """What happens after the task's last attempt failed (attempts oldest first).

    `tool` names the deterministic tool the task is assigned to: its transient failures are
    retried like any other, but past its budget nothing is left to change ("abort": the run fails).
    A task rerouted to a tool has had its reroute: its failure goes on to rule 5 (escalate).
    """
    if not attempts:
        raise ValueError("decide needs the attempt that failed")
    last = attempts[-1]
    if last.outcome != "failed":
        raise ValueError(f"attempt {last.number} did not fail (outcome {last.outcome!r})")
    failure = last.failure

    preface = ""
    trip: str | None = None
    if failure is not None and failure.kind == "transient":
        spent = _budget_spent(budget, config)
        task_spent = budget.task_retries_used >= config.task_budget
        trip = _breaker(failure, recent_capability_failures, config, task_spent=task_spent)
        breaker = _breaker_sentence(trip, recent_capability_failures, config)
        if spent is None:
            delay = backoff_delay(_transient_streak(attempts), config, rng)
            return Decision(
                action="retry",
                reason=(
                    f"Transient retry: attempt {last.number} failed with {_describe(failure)}; "
                    f"it is retried with the same context in {_duration(delay)} "
                    f"(retry {budget.task_retries_used + 1} of {config.task_budget} for the "
                    f"task, {budget.fleet_retries_used + 1} of {budget.fleet_budget} for the "
                    f"fleet).{breaker}"
                ),
                not_before=now + timedelta(seconds=delay),
                trip_capability=trip,
            )
        preface = (
            f"Transient retry: attempt {last.number} failed with {_describe(failure)}, but "
            f"{spent}, so it is not retried with the same context.{breaker} "
        )

    if tool is not None and not any(a.rerouted for a in attempts):
        return Decision(
            action="abort",
            reason=preface
            + f"Fail the run: the task is assigned to the deterministic tool {tool}, which is "
            "neither reframed nor rerouted; nothing is left for the policy to change.",
            trip_capability=trip,
        )
    decision = _after_retry(attempts, ground_truth, alternatives, tools)
    return replace(decision, reason=preface + decision.reason, trip_capability=trip)


def after_background_kill(*, task: str, attempts: Sequence[AttemptView]) -> BackgroundOutcome:
    """What happens to the background work the task's last attempt left running, which was killed.

    It is resumed once, with the same context, when it can be. A Resume that ends the same way
    may have abandoned the work rather than awaited it (a hung test run it could not stop), so
    it is not a failure: the run records a progress line and carries on, and the attempt's own
    outcome stands. The same goes for an attempt that cannot be resumed. An attempt that ended
    in an error is neither resumed nor warned about.
    """
    if not attempts:
        return BackgroundOutcome(action="none", progress_line=None, killed=())
    last = attempts[-1]
    killed = tuple(dict.fromkeys(last.background_killed))
    if not killed:
        return BackgroundOutcome(action="none", progress_line=None, killed=())
    if last.failure is not None and last.failure.kind == "error":
        return BackgroundOutcome(
            action="none",
            progress_line=None,
            killed=(),
            reason=(
                f"No Resume: {task} attempt {last.number} ended in an error, so the background "
                "work it left running is neither resumed nor warned about."
            ),
        )
    work = ", ".join(killed)
    earlier_resume = next((a for a in attempts if a.resumed), None)
    if last.resumable and earlier_resume is None:
        return BackgroundOutcome(
            action="resume",
            progress_line=None,
            killed=killed,
            reason=(
                f"Resume once: {task} attempt {last.number} ended with a background task still "
                f"running ({work}), which was killed; the session may have been waiting on it, "
                "so it is resumed once with the same context."
            ),
        )
    if last.resumed:
        why = (
            f"its Resume (attempt {last.number}) ended with a background task still running "
            f"({work}), which was killed; the work may have been abandoned rather than awaited"
        )
    elif earlier_resume is not None:
        why = (
            f"attempt {last.number} ended with a background task still running ({work}), which "
            f"was killed, and the task already had its one Resume (attempt {earlier_resume.number})"
        )
    else:
        why = (
            f"attempt {last.number} ended with a background task still running ({work}), which "
            "was killed, and its session cannot be resumed"
        )
    return BackgroundOutcome(
        action="carry_on",
        progress_line=carry_on_line(task, killed),
        killed=killed,
        reason=f"Carry on: {task}, {why}; this is not a failure, and the attempt's outcome stands.",
    )


def carry_on_line(task: str, killed: Sequence[str]) -> str:
    """The progress line a run records when it carries on past killed background work."""
    return (
        f"{task}: the Resume ended with a background task still running "
        f"({', '.join(killed)}), which was killed; carrying on"
    )


def failure_cause(*, killed: Sequence[tuple[str, tuple[str, ...]]], cause: str) -> str:
    """A later failure's cause, with the run's killed background work named ahead of it.

    `killed` holds the run's carry-on records, oldest first, as (task, background tasks). Several
    records are chained with ", and " in that order, each once; a record without background tasks
    names nothing. A cause that already starts with these names is returned as it is, so that
    naming the work twice (a redelivered task, a second caller) does not repeat it.
    """
    records = dict.fromkeys((task, tuple(work)) for task, work in killed if work)
    if not records:
        return cause
    named = ", and ".join(
        f"{task} session ended with a background task still running ({', '.join(work)}), "
        "which was killed"
        for task, work in records
    )
    head = f"{named}, and a later step failed: "
    return cause if cause.startswith(head) else head + cause


def _after_retry(
    attempts: Sequence[AttemptView],
    ground_truth: Sequence[Mapping[str, Any]],
    alternatives: Sequence[str],
    tools: Sequence[str],
) -> Decision:
    """Rules 2 to 5: the failure is not retried with the same context."""
    last = attempts[-1]
    failure = last.failure
    previous = attempts[-2] if len(attempts) >= 2 else None

    if previous is not None and _agree(previous, last) and _prompted_differently(previous, last):
        return Decision(
            action="escalate",
            reason=(
                f"Signal rule: attempts {previous.number} and {last.number} were prompted "
                f"differently ({_difference(previous, last)}) and both failed with signature "
                f"{_signature(last)}; agreement between different attempts is information, so "
                "the problem is likely in the task, the spec or the environment, and a person "
                "is asked."
            ),
        )

    reframed = next((a for a in attempts if a.reframed), None)
    if reframed is None:
        vote = ""
        if previous is not None and _agree(previous, last):
            vote = (
                f" Attempts {previous.number} and {last.number} failed the same way with the "
                "same prompt and context, which is another vote, not agreement, so the signal "
                "rule does not count it."
            )
        gets = (
            f"{len(ground_truth)} item{'s' if len(ground_truth) != 1 else ''} of ground truth "
            "and a narrower scope"
            if ground_truth
            else "a narrower scope (no ground truth is recorded for it yet)"
        )
        return Decision(
            action="reframe",
            reason=(
                f"Reframe: attempt {last.number} failed with {_describe(failure)} and no "
                f"attempt has been reframed yet; the next attempt gets {gets}.{vote}"
            ),
            ground_truth=tuple(dict(item) for item in ground_truth),
            scope=_narrower_scope(failure),
        )

    rerouted = next((a for a in attempts if a.rerouted), None)
    targets = _reroute_targets(attempts, alternatives, tools)
    if rerouted is None and targets:
        target = targets[0]
        to = (
            f"the deterministic tool {target.removeprefix(TOOL)}"
            if target.startswith(TOOL)
            else f"agent {target}, of the same role"
        )
        return Decision(
            action="reroute",
            reason=(
                f"Reroute: attempt {last.number} failed with {_describe(failure)} after the "
                f"task was reframed (attempt {reframed.number}), and no attempt has been "
                f"rerouted yet; the task goes from {last.agent} to {to}."
            ),
            reroute_to=target,
        )

    if rerouted is not None:
        why = (
            f"it was reframed (attempt {reframed.number}) and rerouted (attempt {rerouted.number})"
        )
    else:
        why = (
            f"it was reframed (attempt {reframed.number}) and there is no other agent of the "
            "role and no deterministic tool to reroute it to"
        )
    return Decision(
        action="escalate",
        reason=(
            f"Escalate: attempt {last.number} failed with {_describe(failure)}, and {why}; "
            "nothing is left to change without a person."
        ),
    )


def _agree(previous: AttemptView, last: AttemptView) -> bool:
    """Both failed with the same signature. An empty signature names nothing, so it never agrees."""
    return (
        previous.outcome == "failed"
        and previous.failure is not None
        and last.failure is not None
        and bool(last.failure.signature)
        and previous.failure.signature == last.failure.signature
    )


def _prompted_differently(previous: AttemptView, last: AttemptView) -> bool:
    return previous.prompt_hash != last.prompt_hash or previous.context_hash != last.context_hash


def _difference(previous: AttemptView, last: AttemptView) -> str:
    prompt = previous.prompt_hash != last.prompt_hash
    context = previous.context_hash != last.context_hash
    if prompt and context:
        return "another prompt and another context"
    return "another prompt" if prompt else "another context"


def _budget_spent(budget: Budget, config: RetryConfig) -> str | None:
    """Why no retry is left, or None while the task and the fleet both have one."""
    spent = []
    if budget.task_retries_used >= config.task_budget:
        spent.append(
            f"the task's retry budget is spent ({budget.task_retries_used} of "
            f"{config.task_budget} used)"
        )
    if budget.fleet_retries_used >= budget.fleet_budget:
        spent.append(
            f"the fleet's retry budget is spent ({budget.fleet_retries_used} of "
            f"{budget.fleet_budget} used)"
        )
    return " and ".join(spent) or None


def _breaker(
    failure: Failure, recent: int, config: RetryConfig, *, task_spent: bool = False
) -> str | None:
    """The capability to mark down: failures naming it reached the threshold, or the task spent
    its retries on it (slow failures that the window never holds enough of)."""
    if failure.capability and (recent >= config.breaker_threshold or task_spent):
        return failure.capability
    return None


def _breaker_sentence(trip: str | None, recent: int, config: RetryConfig) -> str:
    if trip is None:
        return ""
    why = (
        f"{recent} transient failures named capability {trip} within "
        f"{_duration(config.breaker_window_s)} (threshold {config.breaker_threshold})"
        if recent >= config.breaker_threshold
        else f"the task's retries are spent on transient failures naming capability {trip}"
    )
    return (
        f" Circuit breaker: {why}, so {trip} is marked down and the scheduler holds the work "
        f"that needs it (capability:{trip}) until it is back."
    )


def _transient_streak(attempts: Sequence[AttemptView]) -> int:
    """How many attempts in a row, up to the last, failed transiently: the backoff's exponent."""
    streak = 0
    for attempt in reversed(attempts):
        if attempt.failure is None or attempt.failure.kind != "transient":
            break
        streak += 1
    return max(streak, 1)


def _reroute_targets(
    attempts: Sequence[AttemptView], alternatives: Iterable[str], tools: Iterable[str]
) -> list[str]:
    """Agents of the role first, then tools, in the caller's order, leaving out who already tried."""
    tried = {attempt.agent for attempt in attempts}
    targets = [*alternatives, *(t if t.startswith(TOOL) else TOOL + t for t in tools)]
    return [target for target in dict.fromkeys(targets) if target not in tried]


def _narrower_scope(failure: Failure | None) -> str:
    what = "the part that failed"
    if failure is not None and (failure.signature or failure.message):
        message = failure.message.strip()
        if len(message) > SCOPE_MESSAGE_CHARS:
            cut = message[: SCOPE_MESSAGE_CHARS - 1]
            message = (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip() + "…"  # whole words
        detail = ": ".join(part for part in (failure.signature, message) if part)
        what = f"the part that failed ({detail})"
    return (
        f"Work only on {what}, taking the ground truth you are given as fact; "
        "leave the work that already succeeded as it is."
    )


def _describe(failure: Failure | None) -> str:
    if failure is None:
        return "a failure it gave no details of"
    article = "an" if failure.kind[0] in "aeiou" else "a"
    return f"{article} {failure.kind} failure ({_signature_of(failure)})"


def _signature(attempt: AttemptView) -> str:
    return _signature_of(attempt.failure) if attempt.failure else "none"


def _signature_of(failure: Failure) -> str:
    return failure.signature or "no signature"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _random(rng: random.Random | int) -> random.Random:
    return rng if isinstance(rng, random.Random) else random.Random(rng)
