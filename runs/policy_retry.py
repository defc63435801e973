"""The same-context retry: its budget, the backoff between retries, the circuit breaker. Pure."""

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from runs.policy_attempts import AttemptView, Failure

# 2**64 times any sane base delay is past any sane cap; a larger exponent would overflow a float.
MAX_EXPONENT: Final = 64


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


def budget_spent(budget: Budget, config: RetryConfig) -> str | None:
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


def tripped_capability(
    failure: Failure, recent: int, config: RetryConfig, *, task_spent: bool = False
) -> str | None:
    """The capability to mark down: failures naming it reached the threshold, or the task spent
    its retries on it (slow failures that the window never holds enough of)."""
    if failure.capability and (recent >= config.breaker_threshold or task_spent):
        return failure.capability
    return None


def breaker_sentence(trip: str | None, recent: int, config: RetryConfig) -> str:
    """The sentence a decision's reason gains when the breaker trips (empty when it does not)."""
    if trip is None:
        return ""
    why = (
        f"{recent} transient failures named capability {trip} within "
        f"{duration(config.breaker_window_s)} (threshold {config.breaker_threshold})"
        if recent >= config.breaker_threshold
        else f"the task's retries are spent on transient failures naming capability {trip}"
    )
    return (
        f" Circuit breaker: {why}, so {trip} is marked down and the scheduler holds the work "
        f"that needs it (capability:{trip}) until it is back."
    )


def transient_streak(attempts: Sequence[AttemptView]) -> int:
    """How many attempts in a row, up to the last, failed transiently: the backoff's exponent."""
    streak = 0
    for attempt in reversed(attempts):
        if attempt.failure is None or attempt.failure.kind != "transient":
            break
        streak += 1
    return max(streak, 1)


def duration(seconds: float) -> str:
    """A delay as the run's timeline shows it: seconds, minutes or hours."""
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _random(rng: random.Random | int) -> random.Random:
    return rng if isinstance(rng, random.Random) else random.Random(rng)
