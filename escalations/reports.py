"""Manager reports as pure computations: durations, late disasters, same-context retries, runs.

No ORM and no clock: the selectors load the facts and pass `now` where it matters.
"""

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

TRANSIENT = "transient"
EARLY_ATTEMPTS = 2  # an escalation at attempt 1 or 2 is early: the agent stopped in time


@dataclass(frozen=True)
class Stats:
    count: int
    median: float | None  # minutes
    p90: float | None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..1) by linear interpolation between closest ranks; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def minutes_between(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return max(0.0, (end - start) / timedelta(minutes=1))


def stats(values: Iterable[float | None]) -> Stats:
    found = [v for v in values if v is not None]
    return Stats(count=len(found), median=percentile(found, 0.5), p90=percentile(found, 0.9))


@dataclass(frozen=True)
class AttemptFact:
    task: str  # unique across the runs considered (e.g. "run/task")
    number: int
    prompt_hash: str
    context_hash: str
    failure_kind: str  # "" when it did not fail


def same_context_retries(attempts: Iterable[AttemptFact]) -> list[tuple[AttemptFact, AttemptFact]]:
    """Pairs (failed, next) where a non-transient failure was run again on the same prompt and
    context: another vote, not a retry (seed, Control 2). There should be none."""
    by_task: dict[str, list[AttemptFact]] = {}
    for attempt in attempts:
        by_task.setdefault(attempt.task, []).append(attempt)
    found = []
    for task in sorted(by_task):
        ordered = sorted(by_task[task], key=lambda a: a.number)
        for before, after in zip(ordered, ordered[1:], strict=False):
            if (
                before.failure_kind
                and before.failure_kind != TRANSIENT
                and (before.prompt_hash, before.context_hash)
                == (after.prompt_hash, after.context_hash)
            ):
                found.append((before, after))
    return found


def is_late_disaster(checked_at: datetime | None, artifacts_at: Iterable[datetime]) -> bool:
    """A refuted claim found only after work built on it had produced artifacts (PRs, files)."""
    return checked_at is not None and any(at <= checked_at for at in artifacts_at)


def run_summary(
    radii: Mapping[str, Mapping[str, Any]], statuses: Mapping[str, str]
) -> dict[str, Any]:
    """A run's blast radius: that of its widest-reaching claim (most agents, then artifacts, then
    minutes), and how its claims stand. A claim nobody ever checked keeps counting minutes to
    now, so minutes alone would crown a forgotten claim over the one that did the damage."""
    widest = max(
        radii.items(),
        key=lambda item: (item[1]["agents"], item[1]["artifacts"], item[1]["minutes"], item[0]),
        default=None,
    )
    radius: Mapping[str, Any] = (
        widest[1] if widest else {"agents": 0, "artifacts": 0, "minutes": 0.0, "tasks": ()}
    )
    return {
        "claims": len(statuses),
        "unverified": sum(1 for s in statuses.values() if s == "unverified"),
        "refuted": sum(1 for s in statuses.values() if s == "refuted"),
        "claim": widest[0] if widest else "",
        "agents": radius["agents"],
        "artifacts": radius["artifacts"],
        "minutes": round(radius["minutes"], 1),
        # The widest claim's, as its agents, artifacts and minutes beside it in runs.csv.
        "tasks": len(radius["tasks"]),
    }


@dataclass(frozen=True)
class TimelinessFact:
    """One escalation, as the timeliness report counts it."""

    fleet: str
    reviewer: str  # who answered it, else whom it is assigned to; "" for nobody
    first_look: float | None  # minutes
    answer: float | None  # minutes
    reminders: int
    past_tier_1: bool
    overdue_now: bool
    released: int | None  # tasks its answer released; None while unanswered


def timeliness(facts: Iterable[TimelinessFact], key: str) -> list[dict[str, Any]]:
    """Per fleet (`key="fleet"`) or per reviewer (`key="reviewer"`): time to first look and to
    answer (median, p90), reminders sent, escalated past tier 1, overdue now, and answers that
    released more than one task."""
    groups: dict[str, list[TimelinessFact]] = {}
    for fact in facts:
        groups.setdefault(getattr(fact, key), []).append(fact)
    return [
        {
            "name": name,
            "escalations": len(group),
            "first_look": stats(f.first_look for f in group),
            "answer": stats(f.answer for f in group),
            "reminders": sum(f.reminders for f in group),
            "past_tier_1": sum(1 for f in group if f.past_tier_1),
            "overdue_now": sum(1 for f in group if f.overdue_now),
            "answers": sum(1 for f in group if f.released is not None),
            "released_many": sum(1 for f in group if (f.released or 0) > 1),
        }
        for name, group in sorted(groups.items())
    ]
