"""The retry policy: what happens after a failed attempt, and after killed background work. Pure.

`decide` applies the retry policy's rules in order: a transient failure is retried with the same context
and a backoff, within the task's and the fleet's retry budget (repeated transient failures naming
one capability trip its circuit breaker); then the signal rule; then reframe; then reroute; then
escalate. Nothing else ever retries with the same context: re-running a reasoning, spec,
environment or error failure as it was is another vote, not a retry.

`after_background_kill` (in `runs.policy_background`) handles an attempt that ended with
background work still running, which was killed: one Resume with the same context, then a
progress line and carrying on, and `failure_cause` names that killed work ahead of a later
failure's cause.

How a caller composes them after an attempt that failed or left killed background work:
`after_background_kill` first. "resume" is the decision (a failure the attempt reported waits for
the Resume's own outcome). "carry_on" records the progress line and the attempt's outcome stands:
a succeeded attempt stays succeeded, and a failed one goes on to `decide`. "none" goes straight
to `decide` if the attempt failed.

The retry's budget, backoff and circuit breaker are in `runs.policy_retry`, the attempts it reads
in `runs.policy_attempts`; this module is the policy's public face and keeps rules 1 to 5.

No clock, no global randomness, no I/O: the caller passes `now` and a `random.Random` (or a seed).
"""

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Final

from runs.policy_attempts import FAILURE_KINDS, OUTCOMES, AttemptView, Failure
from runs.policy_background import (
    BACKGROUND_ACTIONS,
    BackgroundOutcome,
    after_background_kill,
    carry_on_line,
    failure_cause,
)
from runs.policy_retry import (
    MAX_EXPONENT,
    Budget,
    RetryConfig,
    backoff_delay,
    breaker_sentence,
    budget_spent,
    duration,
    transient_streak,
    tripped_capability,
)

__all__ = [
    "ACTIONS",
    "BACKGROUND_ACTIONS",
    "FAILURE_KINDS",
    "MAX_EXPONENT",
    "OUTCOMES",
    "SCOPE_MESSAGE_CHARS",
    "TOOL",
    "AttemptView",
    "BackgroundOutcome",
    "Budget",
    "Decision",
    "Failure",
    "RetryConfig",
    "after_background_kill",
    "backoff_delay",
    "carry_on_line",
    "decide",
    "failure_cause",
]

ACTIONS: Final = ("retry", "reframe", "reroute", "escalate", "resume", "abort")
TOOL: Final = "tool:"

# A long failure message is cut to this many characters in the reframe's scope sentence.
SCOPE_MESSAGE_CHARS: Final = 200


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
        spent = budget_spent(budget, config)
        task_spent = budget.task_retries_used >= config.task_budget
        trip = tripped_capability(
            failure, recent_capability_failures, config, task_spent=task_spent
        )
        breaker = breaker_sentence(trip, recent_capability_failures, config)
        if spent is None:
            return _retry(attempts, budget, config, breaker=breaker, trip=trip, now=now, rng=rng)
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


def _retry(
    attempts: Sequence[AttemptView],
    budget: Budget,
    config: RetryConfig,
    *,
    breaker: str,
    trip: str | None,
    now: datetime,
    rng: random.Random | int,
) -> Decision:
    """Rule 1: a transient failure within budget is retried with the same context, after a
    backoff that grows with the streak of transient failures."""
    last = attempts[-1]
    delay = backoff_delay(transient_streak(attempts), config, rng)
    return Decision(
        action="retry",
        reason=(
            f"Transient retry: attempt {last.number} failed with {_describe(last.failure)}; "
            f"it is retried with the same context in {duration(delay)} "
            f"(retry {budget.task_retries_used + 1} of {config.task_budget} for the "
            f"task, {budget.fleet_retries_used + 1} of {budget.fleet_budget} for the "
            f"fleet).{breaker}"
        ),
        not_before=now + timedelta(seconds=delay),
        trip_capability=trip,
    )


def _after_retry(
    attempts: Sequence[AttemptView],
    ground_truth: Sequence[Mapping[str, Any]],
    alternatives: Sequence[str],
    tools: Sequence[str],
) -> Decision:
    """Rules 2 to 5: the failure is not retried with the same context."""
    last = attempts[-1]
    previous = attempts[-2] if len(attempts) >= 2 else None
    agreed = previous if previous is not None and _agree(previous, last) else None
    if agreed is not None and _prompted_differently(agreed, last):
        return _signal_rule(agreed, last)
    reframed = next((a for a in attempts if a.reframed), None)
    if reframed is None:
        return _reframe(last, ground_truth, another_vote=agreed)
    rerouted = next((a for a in attempts if a.rerouted), None)
    targets = _reroute_targets(attempts, alternatives, tools)
    if rerouted is None and targets:
        return _reroute(last, reframed, targets[0])
    return _escalate(last, reframed, rerouted)


def _signal_rule(previous: AttemptView, last: AttemptView) -> Decision:
    """Rule 2: differently prompted attempts that fail the same way point at the task."""
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


def _reframe(
    last: AttemptView,
    ground_truth: Sequence[Mapping[str, Any]],
    *,
    another_vote: AttemptView | None,
) -> Decision:
    """Rule 3: the first failure past retries gets ground truth and a narrower scope.

    `another_vote` is the attempt before the last when both failed the same way as prompted
    alike: the reason says why the signal rule did not count it."""
    vote = ""
    if another_vote is not None:
        vote = (
            f" Attempts {another_vote.number} and {last.number} failed the same way with the "
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
            f"Reframe: attempt {last.number} failed with {_describe(last.failure)} and no "
            f"attempt has been reframed yet; the next attempt gets {gets}.{vote}"
        ),
        ground_truth=tuple(dict(item) for item in ground_truth),
        scope=_narrower_scope(last.failure),
    )


def _reroute(last: AttemptView, reframed: AttemptView, target: str) -> Decision:
    """Rule 4: a reframed task that fails again goes to another agent of the role or a tool."""
    to = (
        f"the deterministic tool {target.removeprefix(TOOL)}"
        if target.startswith(TOOL)
        else f"agent {target}, of the same role"
    )
    return Decision(
        action="reroute",
        reason=(
            f"Reroute: attempt {last.number} failed with {_describe(last.failure)} after the "
            f"task was reframed (attempt {reframed.number}), and no attempt has been "
            f"rerouted yet; the task goes from {last.agent} to {to}."
        ),
        reroute_to=target,
    )


def _escalate(last: AttemptView, reframed: AttemptView, rerouted: AttemptView | None) -> Decision:
    """Rule 5: reframed and rerouted (or nowhere to reroute), so a person is asked."""
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
            f"Escalate: attempt {last.number} failed with {_describe(last.failure)}, and {why}; "
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
