"""Who gets an escalation and what is due when: routing, the pool's turn, due times and tiers.

Pure: plain data in, decisions out; the caller passes `now`. Rules where the product is silent:

- The first routing rule (by position) whose every non-empty condition matches wins; no rule
  matching leaves the escalation unassigned (it is still announced on the fleet's channels).
- Within a pool the reviewer least recently assigned (never assigned first; then the lower id)
  who is not away gets it; a pool whose reviewers are all away leaves it unassigned in the pool.
- Due rules: every rule naming the failure kind or the urgency matches; only when none does, the
  default (naming neither) applies. The earliest due time wins.
- Tiers: tier 1 is the rule's pool, then its next pool (if any), then the fleet's managers (the
  last tier). Tier k's deadline is the due time plus (k - 1) windows, a window being the time
  from opening to the due time. Half a window before its deadline the tier's assignee is
  reminded, once; at the deadline the escalation moves to the next tier, once. At the last tier
  an overdue escalation stays where it is, marked overdue: nothing answers, aborts or denies it.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from escalations.packets import URGENCIES

__all__ = ["URGENCIES"]
REMINDER = "reminder"
TIER = "tier"


@dataclass(frozen=True)
class About:
    """What a new escalation is about, as the routing rules match it."""

    agent_role: str
    capabilities: tuple[str, ...]
    run: str
    failure_kind: str


@dataclass(frozen=True)
class Rule:
    id: int
    position: int
    agent_role: str = ""
    capability: str = ""
    run: str = ""
    failure_kind: str = ""


def matches(rule: Rule, about: About) -> bool:
    return (
        (not rule.agent_role or rule.agent_role == about.agent_role)
        and (not rule.capability or rule.capability in about.capabilities)
        and (not rule.run or rule.run == about.run)
        and (not rule.failure_kind or rule.failure_kind == about.failure_kind)
    )


def route(rules: Iterable[Rule], about: About) -> Rule | None:
    """The first rule, by position then id, that matches."""
    for rule in sorted(rules, key=lambda r: (r.position, r.id)):
        if matches(rule, about):
            return rule
    return None


@dataclass(frozen=True)
class Seat:
    """A reviewer's seat in a pool."""

    user_id: int
    last_assigned_at: datetime | None
    away: bool = False


def next_reviewer(seats: Iterable[Seat]) -> int | None:
    """The least recently assigned reviewer who is not away; None if every one is away."""
    present = [seat for seat in seats if not seat.away]
    if not present:
        return None
    never = [seat for seat in present if seat.last_assigned_at is None]
    if never:
        return min(seat.user_id for seat in never)
    return min(present, key=lambda s: (s.last_assigned_at, s.user_id)).user_id


@dataclass(frozen=True)
class DueRule:
    minutes: int
    failure_kind: str = ""
    urgency: str = ""


def due_minutes(rules: Iterable[DueRule], *, failure_kind: str, urgency: str) -> int | None:
    """Minutes the escalation may wait, or None when the fleet sets no due time for it."""
    rules = list(rules)
    specific = [
        r.minutes
        for r in rules
        if (r.failure_kind or r.urgency)
        and (not r.failure_kind or r.failure_kind == failure_kind)
        and (not r.urgency or r.urgency == urgency)
    ]
    if specific:
        return min(specific)
    default = [r.minutes for r in rules if not r.failure_kind and not r.urgency]
    return min(default) if default else None


@dataclass(frozen=True)
class Timing:
    opened_at: datetime
    due_at: datetime
    tier: int
    last_tier: int
    done: frozenset[tuple[str, int]]  # (kind, tier) of the steps already made


@dataclass(frozen=True)
class Step:
    kind: str  # REMINDER or TIER
    tier: int  # the tier reminded, or the tier moved to
    due_at: datetime


def window(timing: Timing) -> timedelta:
    return max(timing.due_at - timing.opened_at, timedelta(minutes=1))


def deadline(timing: Timing, tier: int) -> datetime:
    return timing.due_at + (tier - 1) * window(timing)


def next_step(timing: Timing, now: datetime) -> Step | None:
    """The one step due now, if any: a tier change first (a reminder is moot once overdue)."""
    at = deadline(timing, timing.tier)
    if now >= at and timing.tier < timing.last_tier:
        step = Step(TIER, timing.tier + 1, at)
        return None if (TIER, step.tier) in timing.done else step
    half = at - window(timing) / 2
    if half <= now < at and (REMINDER, timing.tier) not in timing.done:
        return Step(REMINDER, timing.tier, half)
    return None


def when_next(timing: Timing, now: datetime) -> datetime | None:
    """When the next step falls due (the sweep looks no earlier), or None: nothing more to do.

    A reminder whose tier's deadline has passed is never due (the tier change is, or nothing)."""
    at = deadline(timing, timing.tier)
    half = at - window(timing) / 2
    remind = (REMINDER, timing.tier) not in timing.done and now < at
    if timing.tier < timing.last_tier:
        return half if remind else at
    return half if remind else None


def overdue(due_at: datetime | None, now: datetime) -> bool:
    return due_at is not None and now >= due_at
