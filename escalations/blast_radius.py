"""Blast radius: how far an unchecked claim travelled before something checked it.

Pure: the caller loads one run's claims, tasks and claim uses and passes `now`.

A claim is unchecked from `posted_at` until `checked_at` (its first verdict), or, never checked,
until `now` while its run goes on and until the run's end once it is over. The times are the
server's for live events and the envelopes' for imported ones (the caller's facts say which).
The tasks it affected are found by closure, to a fixed point:

1. the tasks that started consuming it while it was unchecked (a use before `checked_at`; any use
   of a claim never checked);
2. every task downstream in the graph of an affected task that started before the claim was
   checked (any started task while it is unchecked);
3. the tasks that consumed a claim posted by an affected task while *that* claim was unchecked.

Its artifacts are those the affected tasks reported while it was unchecked: at or before its
check (never checked, up to now or the run's end). Work reported after the check did not travel
on the unchecked claim: something had checked it by then.

The producer is not affected by its own claim; the checker is, when it consumed the claim before
its verdict. Facts that refer outside the given run (a use of an unknown task, a prerequisite
that is not a task) are ignored.
"""

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

ClaimStatus = Literal["unverified", "verified", "refuted"]


@dataclass(frozen=True)
class ClaimFact:
    key: str
    producer_task: str
    posted_at: datetime
    checked_at: datetime | None  # when it was first verified or refuted
    status: ClaimStatus
    evidence_checkable: bool  # evidence a verifier can re-run (not missing, not `agent:` text)
    run_ended_at: datetime | None = None  # when its run was over (None while it goes on)

    def __post_init__(self) -> None:
        if self.status not in ("unverified", "verified", "refuted"):
            raise ValueError(f"claim {self.key!r}: unknown status {self.status!r}")
        if (self.checked_at is None) != (self.status == "unverified"):
            raise ValueError(
                f"claim {self.key!r}: a {self.status} claim "
                + ("needs" if self.checked_at is None else "has no")
                + " checked_at"
            )

    def unchecked_until(self, now: datetime) -> datetime:
        """Its check; never checked, now, or its run's end (no work travels on it after that)."""
        if self.checked_at is not None:
            return self.checked_at
        if self.run_ended_at is not None:
            return min(now, self.run_ended_at)
        return now

    def unchecked_minutes(self, now: datetime) -> float:
        """From its post to `unchecked_until`."""
        return max(0.0, (self.unchecked_until(now) - self.posted_at).total_seconds() / 60)


@dataclass(frozen=True)
class TaskFact:
    key: str
    agent: str
    started_at: datetime | None  # its first attempt; None if it never started
    prerequisites: tuple[str, ...] = ()
    artifacts: tuple[datetime, ...] = ()  # when it reported each artifact (PRs, files)


@dataclass(frozen=True)
class ClaimUse:
    claim: str
    task: str
    at: datetime  # when the task started consuming the claim


@dataclass(frozen=True)
class Radius:
    agents: int
    artifacts: int
    minutes: float
    tasks: tuple[str, ...]


@dataclass(frozen=True)
class Handoff:
    producer: str  # agent
    consumer: str  # agent
    claims: int  # distinct claims handed over
    checkable: int  # of those, how many carried checkable evidence
    refuted: int
    median_unchecked_minutes: float | None  # None only if no claim crossed
    unchecked: tuple[str, ...] = ()  # the claims that crossed without checkable evidence


def blast_radius(
    claim: str,
    *,
    claims: Mapping[str, ClaimFact],
    tasks: Mapping[str, TaskFact],
    uses: Sequence[ClaimUse],
    now: datetime,
) -> Radius:
    """The blast radius of one claim (KeyError if it is not among `claims`)."""
    if claim not in claims:
        raise KeyError(claim)
    return _Run.index(claims, tasks, uses).radius(claim, now)


def blast_radii(
    *,
    claims: Mapping[str, ClaimFact],
    tasks: Mapping[str, TaskFact],
    uses: Sequence[ClaimUse],
    now: datetime,
) -> dict[str, Radius]:
    """Every claim's blast radius: the run is indexed once, each closure walks what it reaches."""
    run = _Run.index(claims, tasks, uses)
    return {key: run.radius(key, now) for key in claims}


def handoffs(
    *,
    claims: Mapping[str, ClaimFact],
    tasks: Mapping[str, TaskFact],
    uses: Sequence[ClaimUse],
    now: datetime,
) -> list[Handoff]:
    """Each producer agent → consumer agent boundary claims crossed, by (producer, consumer)."""
    crossed: dict[tuple[str, str], set[str]] = defaultdict(set)
    for use in uses:
        fact = claims.get(use.claim)
        consumer = tasks.get(use.task)
        producer = tasks.get(fact.producer_task) if fact is not None else None
        if producer is None or consumer is None or producer.agent == consumer.agent:
            continue
        crossed[(producer.agent, consumer.agent)].add(use.claim)
    found = []
    for (producer_agent, consumer_agent), keys in sorted(crossed.items()):
        facts = [claims[key] for key in keys]
        minutes = [fact.unchecked_minutes(now) for fact in facts]
        found.append(
            Handoff(
                producer=producer_agent,
                consumer=consumer_agent,
                claims=len(facts),
                checkable=sum(fact.evidence_checkable for fact in facts),
                refuted=sum(fact.status == "refuted" for fact in facts),
                median_unchecked_minutes=round(statistics.median(minutes), 1) if minutes else None,
                unchecked=tuple(sorted(k for k in keys if not claims[k].evidence_checkable)),
            )
        )
    return found


@dataclass(frozen=True)
class _Run:
    """One run's facts, indexed for closures."""

    claims: Mapping[str, ClaimFact]
    tasks: Mapping[str, TaskFact]
    unchecked_consumers: Mapping[str, frozenset[str]]  # claim -> tasks that used it unchecked
    posted_by: Mapping[str, tuple[str, ...]]  # task -> claims it posted
    dependents: Mapping[str, tuple[str, ...]]  # task -> tasks that list it as a prerequisite

    @classmethod
    def index(
        cls,
        claims: Mapping[str, ClaimFact],
        tasks: Mapping[str, TaskFact],
        uses: Sequence[ClaimUse],
    ) -> "_Run":
        consumers: dict[str, set[str]] = defaultdict(set)
        for use in uses:
            fact = claims.get(use.claim)
            if fact is None or use.task not in tasks:
                continue
            # Strictly before: a task that starts at the instant of the verdict sees the verdict.
            if fact.checked_at is None or use.at < fact.checked_at:
                consumers[use.claim].add(use.task)
        posted_by: dict[str, list[str]] = defaultdict(list)
        for key, fact in claims.items():
            posted_by[fact.producer_task].append(key)
        dependents: dict[str, list[str]] = defaultdict(list)
        for key, task in tasks.items():
            for prerequisite in task.prerequisites:
                if prerequisite in tasks and prerequisite != key:
                    dependents[prerequisite].append(key)
        return cls(
            claims=claims,
            tasks=tasks,
            unchecked_consumers={key: frozenset(found) for key, found in consumers.items()},
            posted_by={key: tuple(found) for key, found in posted_by.items()},
            dependents={key: tuple(found) for key, found in dependents.items()},
        )

    def radius(self, claim: str, now: datetime) -> Radius:
        affected = self.affected(claim)
        fact = self.claims[claim]
        until = fact.unchecked_until(now)
        return Radius(
            agents=len({self.tasks[key].agent for key in affected}),
            # At the check itself counts: it was reported before the verdict could stop it.
            artifacts=sum(at <= until for key in affected for at in self.tasks[key].artifacts),
            minutes=round(fact.unchecked_minutes(now), 1),
            tasks=tuple(sorted(affected)),
        )

    def affected(self, claim: str) -> set[str]:
        checked_at = self.claims[claim].checked_at

        def started_in_time(key: str) -> bool:
            started = self.tasks[key].started_at
            return started is not None and (checked_at is None or started < checked_at)

        affected: set[str] = set()
        walked: set[str] = set()  # graph nodes whose dependents are already being walked
        seen_claims = {claim}
        pending = list(self.unchecked_consumers.get(claim, ()))
        while pending:
            key = pending.pop()
            if key in affected:
                continue
            affected.add(key)
            for posted in self.posted_by.get(key, ()):
                if posted not in seen_claims:
                    seen_claims.add(posted)
                    pending.extend(self.unchecked_consumers.get(posted, ()))
            if key in walked:
                continue
            # Walk through tasks that started too late as well: a later descendant may not have.
            walked.add(key)
            below = [key]
            while below:
                for dependent in self.dependents.get(below.pop(), ()):
                    if dependent in walked:
                        continue
                    walked.add(dependent)
                    below.append(dependent)
                    if started_in_time(dependent):
                        pending.append(dependent)
        return affected
