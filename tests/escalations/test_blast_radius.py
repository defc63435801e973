"""Blast radius and handoff coverage, on the seed's PhoenixDX run and on generated runs."""

import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from escalations.blast_radius import (
    ClaimFact,
    ClaimUse,
    Handoff,
    Radius,
    TaskFact,
    blast_radii,
    blast_radius,
    handoffs,
)

RUN_STARTED = datetime(2025, 6, 2, 9, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    """A moment of the run, in minutes after it started."""
    return RUN_STARTED + timedelta(minutes=minutes)


def claim(
    key: str,
    *,
    by: str,
    posted: float,
    checked: float | None = None,
    status: str = "unverified",
    checkable: bool = False,
) -> ClaimFact:
    return ClaimFact(
        key=key,
        producer_task=by,
        posted_at=at(posted),
        checked_at=None if checked is None else at(checked),
        status=status,  # type: ignore[arg-type]
        evidence_checkable=checkable,
    )


def task(
    key: str,
    *,
    agent: str,
    started: float | None,
    after: Sequence[str] = (),
    artifacts: Sequence[float] = (),
) -> TaskFact:
    """`artifacts`: the minute each was reported."""
    return TaskFact(
        key=key,
        agent=agent,
        started_at=None if started is None else at(started),
        prerequisites=tuple(after),
        artifacts=tuple(at(minute) for minute in artifacts),
    )


def use(claim_key: str, task_key: str, minutes: float) -> ClaimUse:
    return ClaimUse(claim=claim_key, task=task_key, at=at(minutes))


def by_key[T: (ClaimFact, TaskFact)](*facts: T) -> dict[str, T]:
    return {fact.key: fact for fact in facts}


# The all-green run, as it happened. The planner invents `customer_tier`; the schema agent
# "confirms" it from the plan itself (evidence `agent:planner`, so never checkable); coder A builds
# the resolver on both (2 PRs); coder B builds the API change on the confirmation (1 PR) and the
# tests after it, with fixtures that include the column (1 PR). A reviewer opens the first PR,
# checks the real schema and refutes the plan's claim 40 minutes after it was posted.
ALL_GREEN_TASKS = by_key(
    task("plan", agent="planner", started=0),
    task("confirm-schema", agent="schema", started=2, after=["plan"]),
    task(
        "discount-resolver",
        agent="coder-a",
        started=6,
        after=["confirm-schema"],
        artifacts=[25, 25],
    ),
    task("api-change", agent="coder-b", started=7, after=["confirm-schema"], artifacts=[18]),
    task("api-tests", agent="coder-b", started=20, after=["api-change"], artifacts=[32]),
)
ALL_GREEN_CLAIMS = by_key(
    claim("plan.customer-tier", by="plan", posted=1, checked=41, status="refuted"),
    claim("schema.customer-tier-confirmed", by="confirm-schema", posted=4),
    # Green because the fixtures and the code agree with each other.
    claim("tests.pass", by="api-tests", posted=30, checked=31, status="verified", checkable=True),
)
ALL_GREEN_USES = [
    use("plan.customer-tier", "confirm-schema", 2),
    use("plan.customer-tier", "discount-resolver", 6),
    use("schema.customer-tier-confirmed", "discount-resolver", 6),
    use("schema.customer-tier-confirmed", "api-change", 7),
]
ALL_GREEN_NOW = at(60)

# The replay with containment on. The same claim arrives unverified; the schema agent consumes it
# to check it, runs the information_schema query and refutes it 2 minutes after it was posted. The
# planner, reframed with the real schema, posts a plan that cites the query; the schema agent
# verifies it and only then do the coders start, so they are downstream of the checker but never
# built on the bad claim.
REPLAY_TASKS = by_key(
    task("plan", agent="planner", started=0),
    task("confirm-schema", agent="schema", started=1.5, after=["plan"]),
    task(
        "discount-resolver",
        agent="coder-a",
        started=7,
        after=["confirm-schema"],
        artifacts=[25, 25],
    ),
    task("api-change", agent="coder-b", started=7, after=["confirm-schema"], artifacts=[18]),
    task("api-tests", agent="coder-b", started=20, after=["api-change"], artifacts=[32]),
)
REPLAY_CLAIMS = by_key(
    claim("plan.customer-tier", by="plan", posted=1, checked=3, status="refuted"),
    claim("plan.tier-source", by="plan", posted=5, checked=5.6, status="verified", checkable=True),
)
REPLAY_USES = [
    use("plan.customer-tier", "confirm-schema", 1.5),
    use("plan.tier-source", "confirm-schema", 5.1),
    use("plan.tier-source", "discount-resolver", 7),
    use("plan.tier-source", "api-change", 7),
]
REPLAY_NOW = at(60)


def test_the_all_green_run_reaches_3_agents_4_prs_and_40_minutes() -> None:
    radius = blast_radius(
        "plan.customer-tier",
        claims=ALL_GREEN_CLAIMS,
        tasks=ALL_GREEN_TASKS,
        uses=ALL_GREEN_USES,
        now=ALL_GREEN_NOW,
    )

    assert radius == Radius(
        agents=3,
        artifacts=4,
        minutes=40.0,
        tasks=("api-change", "api-tests", "confirm-schema", "discount-resolver"),
    )


def test_the_replay_with_containment_stops_at_the_checker_in_2_minutes() -> None:
    radius = blast_radius(
        "plan.customer-tier",
        claims=REPLAY_CLAIMS,
        tasks=REPLAY_TASKS,
        uses=REPLAY_USES,
        now=REPLAY_NOW,
    )

    assert radius == Radius(agents=1, artifacts=0, minutes=2.0, tasks=("confirm-schema",))


def test_the_replays_reframed_plan_reaches_only_its_checker() -> None:
    radii = blast_radii(claims=REPLAY_CLAIMS, tasks=REPLAY_TASKS, uses=REPLAY_USES, now=REPLAY_NOW)

    assert radii["plan.tier-source"] == Radius(
        agents=1, artifacts=0, minutes=0.6, tasks=("confirm-schema",)
    )


def test_it_gives_every_claim_of_the_all_green_run_its_radius() -> None:
    radii = blast_radii(
        claims=ALL_GREEN_CLAIMS, tasks=ALL_GREEN_TASKS, uses=ALL_GREEN_USES, now=ALL_GREEN_NOW
    )

    assert radii == {
        "plan.customer-tier": Radius(
            agents=3,
            artifacts=4,
            minutes=40.0,
            tasks=("api-change", "api-tests", "confirm-schema", "discount-resolver"),
        ),
        # Never checked: it counts to now, and everything built on it so far.
        "schema.customer-tier-confirmed": Radius(
            agents=2,
            artifacts=4,
            minutes=56.0,
            tasks=("api-change", "api-tests", "discount-resolver"),
        ),
        "tests.pass": Radius(agents=0, artifacts=0, minutes=1.0, tasks=()),
    }


def test_it_maps_the_all_green_runs_handoffs_none_of_them_checkable() -> None:
    found = handoffs(
        claims=ALL_GREEN_CLAIMS, tasks=ALL_GREEN_TASKS, uses=ALL_GREEN_USES, now=ALL_GREEN_NOW
    )

    assert found == [
        Handoff("planner", "coder-a", 1, 0, 1, 40.0, unchecked=("plan.customer-tier",)),
        Handoff("planner", "schema", 1, 0, 1, 40.0, unchecked=("plan.customer-tier",)),
        Handoff("schema", "coder-a", 1, 0, 0, 56.0, unchecked=("schema.customer-tier-confirmed",)),
        Handoff("schema", "coder-b", 1, 0, 0, 56.0, unchecked=("schema.customer-tier-confirmed",)),
    ]


def test_it_maps_the_replays_handoffs() -> None:
    found = handoffs(claims=REPLAY_CLAIMS, tasks=REPLAY_TASKS, uses=REPLAY_USES, now=REPLAY_NOW)

    assert found == [
        Handoff(
            "planner", "coder-a", claims=1, checkable=1, refuted=0, median_unchecked_minutes=0.6
        ),
        Handoff(
            "planner", "coder-b", claims=1, checkable=1, refuted=0, median_unchecked_minutes=0.6
        ),
        # The claim with no checkable evidence is named: a report links to it.
        Handoff("planner", "schema", 2, 1, 1, 1.3, unchecked=("plan.customer-tier",)),
    ]


def test_a_handoff_counts_a_claim_once_however_often_it_crosses() -> None:
    uses = [*ALL_GREEN_USES, use("plan.customer-tier", "confirm-schema", 3)]

    found = handoffs(claims=ALL_GREEN_CLAIMS, tasks=ALL_GREEN_TASKS, uses=uses, now=ALL_GREEN_NOW)

    assert found[1] == Handoff(
        "planner", "schema", 1, 0, 1, 40.0, unchecked=("plan.customer-tier",)
    )


def test_a_claim_used_within_one_agent_is_no_handoff() -> None:
    tasks = by_key(
        task("api-change", agent="coder-b", started=0),
        task("api-tests", agent="coder-b", started=5, after=["api-change"]),
    )
    claims = by_key(claim("api.shape", by="api-change", posted=1))

    found = handoffs(claims=claims, tasks=tasks, uses=[use("api.shape", "api-tests", 5)], now=at(9))

    assert found == []


def test_the_producer_is_not_in_its_own_claims_radius() -> None:
    tasks = by_key(
        task("plan", agent="planner", started=0),
        task("build", agent="coder-a", started=3, after=["plan"]),
    )
    claims = by_key(claim("plan.x", by="plan", posted=1))

    radius = blast_radius("plan.x", claims=claims, tasks=tasks, uses=[], now=at(10))

    assert radius == Radius(agents=0, artifacts=0, minutes=9.0, tasks=())


def test_a_task_that_starts_consuming_at_the_verdict_is_not_affected() -> None:
    tasks = by_key(
        task("plan", agent="planner", started=0), task("build", agent="coder-a", started=4)
    )
    claims = by_key(claim("plan.x", by="plan", posted=1, checked=4, status="verified"))

    radius = blast_radius(
        "plan.x", claims=claims, tasks=tasks, uses=[use("plan.x", "build", 4)], now=at(10)
    )

    assert radius.tasks == ()


def test_an_unchecked_claim_counts_to_now_and_every_use_so_far() -> None:
    tasks = by_key(
        task("plan", agent="planner", started=0), task("build", agent="coder-a", started=50)
    )
    claims = by_key(claim("plan.x", by="plan", posted=1))

    radius = blast_radius(
        "plan.x", claims=claims, tasks=tasks, uses=[use("plan.x", "build", 50)], now=at(61.04)
    )

    assert radius == Radius(agents=1, artifacts=0, minutes=60.0, tasks=("build",))


def test_an_unchecked_claim_of_a_run_that_is_over_stops_counting_at_the_runs_end() -> None:
    tasks = by_key(
        task("plan", agent="planner", started=0), task("build", agent="coder-a", started=5)
    )
    ended = replace(claim("plan.x", by="plan", posted=1), run_ended_at=at(31))

    for now in (at(40), at(60 * 24 * 30)):  # an hour later, a month later: the same
        radius = blast_radius(
            "plan.x",
            claims={"plan.x": ended},
            tasks=tasks,
            uses=[use("plan.x", "build", 5)],
            now=now,
        )
        assert radius == Radius(agents=1, artifacts=0, minutes=30.0, tasks=("build",))


def test_a_claim_checked_after_its_run_ended_counts_to_its_check() -> None:
    # The all-green run: it succeeded at 09:32, and the reviewer refuted the plan at 09:41.
    refuted = replace(ALL_GREEN_CLAIMS["plan.customer-tier"], run_ended_at=at(32))
    radius = blast_radius(
        "plan.customer-tier",
        claims={**ALL_GREEN_CLAIMS, "plan.customer-tier": refuted},
        tasks=ALL_GREEN_TASKS,
        uses=ALL_GREEN_USES,
        now=ALL_GREEN_NOW,
    )
    assert radius.minutes == 40.0


@given(st.floats(0, 600), st.floats(0, 600), st.floats(0, 60_000))
def test_an_unchecked_claim_never_counts_past_its_runs_end(
    posted: float, ended: float, now: float
) -> None:
    fact = replace(claim("x", by="p", posted=posted), run_ended_at=at(ended))
    assert fact.unchecked_minutes(at(now)) <= max(0.0, ended - posted) + 1e-6  # microseconds


def test_downstream_tasks_count_only_if_they_started_before_the_check() -> None:
    tasks = by_key(
        task("plan", agent="planner", started=0),
        task("check", agent="schema", started=2, after=["plan"]),
        task("early", agent="coder-a", started=4, after=["check"], artifacts=[8]),
        task("late", agent="coder-b", started=12, after=["check"], artifacts=[14]),
        task("never", agent="coder-b", started=None, after=["check"]),
    )
    claims = by_key(claim("plan.x", by="plan", posted=1, checked=10, status="refuted"))

    radius = blast_radius(
        "plan.x", claims=claims, tasks=tasks, uses=[use("plan.x", "check", 2)], now=at(30)
    )

    assert radius.tasks == ("check", "early")


def test_it_counts_only_the_artifacts_reported_before_the_check() -> None:
    # The audit's run: coder-a and coder-b start on the plan's claim at 10:03, the checker
    # refutes it at 10:08; coder-a's PR (10:04) travelled on it, coder-b's three (10:30) came after.
    tasks = by_key(
        task("a", agent="planner", started=0),
        task("b", agent="coder-a", started=3, after=["a"], artifacts=[4]),
        task("e", agent="coder-b", started=3, after=["a"], artifacts=[30, 30, 30]),
        task("chk", agent="checker", started=3, after=["a"]),
    )
    claims = by_key(claim("c1", by="a", posted=1, checked=8, status="refuted"))
    uses = [use("c1", "b", 3), use("c1", "e", 3), use("c1", "chk", 3)]

    radius = blast_radius("c1", claims=claims, tasks=tasks, uses=uses, now=at(60))

    assert radius == Radius(agents=3, artifacts=1, minutes=7.0, tasks=("b", "chk", "e"))


def test_an_artifact_reported_at_the_check_counts() -> None:
    tasks = by_key(
        task("plan", agent="planner", started=0),
        task("build", agent="coder-a", started=2, artifacts=[8, 8.01]),
    )
    claims = by_key(claim("plan.x", by="plan", posted=1, checked=8, status="refuted"))

    radius = blast_radius(
        "plan.x", claims=claims, tasks=tasks, uses=[use("plan.x", "build", 2)], now=at(30)
    )

    assert radius.artifacts == 1


def test_an_unchecked_claim_counts_artifacts_up_to_now_or_its_runs_end() -> None:
    tasks = by_key(
        task("plan", agent="planner", started=0),
        task("build", agent="coder-a", started=2, artifacts=[10, 40]),
    )
    unchecked = claim("plan.x", by="plan", posted=1)
    uses = [use("plan.x", "build", 2)]

    going_on = blast_radius(
        "plan.x", claims={"plan.x": unchecked}, tasks=tasks, uses=uses, now=at(50)
    )
    ended = blast_radius(
        "plan.x",
        claims={"plan.x": replace(unchecked, run_ended_at=at(20))},
        tasks=tasks,
        uses=uses,
        now=at(50),
    )

    assert (going_on.artifacts, ended.artifacts) == (2, 1)


def test_it_looks_past_a_late_task_to_an_earlier_descendant() -> None:
    # Only imported history can look like this, but the rule is about start times, not order.
    tasks = by_key(
        task("plan", agent="planner", started=0),
        task("check", agent="schema", started=2),
        task("late", agent="coder-a", started=20, after=["check"]),
        task("below-late", agent="coder-b", started=5, after=["late"]),
    )
    claims = by_key(claim("plan.x", by="plan", posted=1, checked=10, status="refuted"))

    radius = blast_radius(
        "plan.x", claims=claims, tasks=tasks, uses=[use("plan.x", "check", 2)], now=at(30)
    )

    assert radius.tasks == ("below-late", "check")


def test_it_follows_claims_of_affected_tasks_only_while_they_were_unchecked() -> None:
    tasks = by_key(
        task("plan", agent="planner", started=0),
        task("check", agent="schema", started=2),
        task("reads-early", agent="coder-a", started=3),
        task("reads-late", agent="coder-b", started=8),
    )
    claims = by_key(
        claim("plan.x", by="plan", posted=1, checked=20, status="refuted"),
        claim("check.y", by="check", posted=2.5, checked=6, status="verified", checkable=True),
    )
    uses = [
        use("plan.x", "check", 2),
        use("check.y", "reads-early", 3),
        use("check.y", "reads-late", 8),
    ]

    radius = blast_radius("plan.x", claims=claims, tasks=tasks, uses=uses, now=at(30))

    assert radius.tasks == ("check", "reads-early")


def test_a_claim_checked_on_arrival_has_no_radius() -> None:
    tasks = ALL_GREEN_TASKS
    claims = by_key(
        claim("plan.x", by="plan", posted=1, checked=1, status="verified", checkable=True)
    )

    radius = blast_radius(
        "plan.x", claims=claims, tasks=tasks, uses=[use("plan.x", "confirm-schema", 2)], now=at(9)
    )

    assert radius == Radius(agents=0, artifacts=0, minutes=0.0, tasks=())


def test_it_ignores_uses_outside_the_run() -> None:
    uses = [
        *ALL_GREEN_USES,
        use("elsewhere.claim", "api-change", 3),
        use("plan.customer-tier", "ghost", 3),
    ]

    radius = blast_radius(
        "plan.customer-tier",
        claims=ALL_GREEN_CLAIMS,
        tasks=ALL_GREEN_TASKS,
        uses=uses,
        now=ALL_GREEN_NOW,
    )

    assert radius.tasks == ("api-change", "api-tests", "confirm-schema", "discount-resolver")


def test_an_unknown_claim_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        blast_radius("nope", claims=ALL_GREEN_CLAIMS, tasks=ALL_GREEN_TASKS, uses=[], now=at(1))


def test_a_claim_fact_must_agree_with_its_status() -> None:
    with pytest.raises(ValueError, match="needs checked_at"):
        claim("x", by="plan", posted=1, status="refuted")
    with pytest.raises(ValueError, match="has no checked_at"):
        claim("x", by="plan", posted=1, checked=2)
    with pytest.raises(ValueError, match="unknown status"):
        claim("x", by="plan", posted=1, checked=2, status="confirmed")


def test_a_10000_deep_chain_is_walked_without_recursion() -> None:
    depth = 10_000
    tasks = by_key(
        task("t0", agent="a0", started=0),
        *(
            task(f"t{i}", agent=f"a{i % 7}", started=i / 1000, after=[f"t{i - 1}"])
            for i in range(1, depth)
        ),
    )
    claims = by_key(claim("c", by="t0", posted=0))

    radius = blast_radius("c", claims=claims, tasks=tasks, uses=[use("c", "t1", 0.001)], now=at(20))

    assert len(radius.tasks) == depth - 1
    assert radius.agents == 7


# Generated runs: a small DAG, a few claims, uses at whole minutes so that ties happen.
AGENTS = ("planner", "schema", "coder-a", "coder-b")
MINUTE = st.integers(min_value=0, max_value=40)


@st.composite
def runs(draw: st.DrawFn) -> tuple[dict[str, ClaimFact], dict[str, TaskFact], list[ClaimUse]]:
    tasks: dict[str, TaskFact] = {}
    for i in range(draw(st.integers(min_value=1, max_value=7))):
        earlier = [f"t{j}" for j in range(i)]
        after = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=3)) if earlier else []
        tasks[f"t{i}"] = task(
            f"t{i}",
            agent=draw(st.sampled_from(AGENTS)),
            started=draw(st.none() | MINUTE),
            after=after,
            artifacts=draw(st.lists(MINUTE, max_size=3)),
        )
    claims: dict[str, ClaimFact] = {}
    for i in range(draw(st.integers(min_value=1, max_value=5))):
        posted = draw(MINUTE)
        checked = draw(st.none() | st.integers(min_value=posted, max_value=posted + 20))
        claims[f"c{i}"] = claim(
            f"c{i}",
            by=draw(st.sampled_from(sorted(tasks))),
            posted=posted,
            checked=checked,
            status="unverified"
            if checked is None
            else draw(st.sampled_from(["verified", "refuted"])),
            checkable=draw(st.booleans()),
        )
    uses = draw(
        st.lists(
            st.builds(use, st.sampled_from(sorted(claims)), st.sampled_from(sorted(tasks)), MINUTE),
            max_size=12,
        )
    )
    return claims, tasks, uses


def reference_tasks(
    key: str,
    claims: Mapping[str, ClaimFact],
    tasks: Mapping[str, TaskFact],
    uses: Sequence[ClaimUse],
) -> set[str]:
    """DESIGN section 9 read literally, recomputed from scratch until nothing changes."""
    checked_at = claims[key].checked_at

    def unchecked_use(u: ClaimUse) -> bool:
        fact = claims[u.claim]
        return fact.checked_at is None or u.at < fact.checked_at

    def started_in_time(t: str) -> bool:
        started = tasks[t].started_at
        return started is not None and (checked_at is None or started < checked_at)

    affected = {u.task for u in uses if u.claim == key and unchecked_use(u)}
    while True:
        downstream = set(affected)
        while True:
            grown = downstream | {t for t, f in tasks.items() if set(f.prerequisites) & downstream}
            if grown == downstream:
                break
            downstream = grown
        posted = {k for k, fact in claims.items() if fact.producer_task in affected}
        grown = (
            affected
            | {t for t in downstream - affected if started_in_time(t)}
            | {u.task for u in uses if u.claim in posted and unchecked_use(u)}
        )
        if grown == affected:
            return affected
        affected = grown


@given(runs())
def test_it_agrees_with_the_definition_read_literally(
    run: tuple[dict[str, ClaimFact], dict[str, TaskFact], list[ClaimUse]],
) -> None:
    claims, tasks, uses = run

    radii = blast_radii(claims=claims, tasks=tasks, uses=uses, now=at(90))

    for key, radius in radii.items():
        expected = reference_tasks(key, claims, tasks, uses)
        assert radius.tasks == tuple(sorted(expected))
        assert radius.agents == len({tasks[t].agent for t in expected})
        until = claims[key].unchecked_until(at(90))
        assert radius.artifacts == sum(a <= until for t in expected for a in tasks[t].artifacts)
        assert radius == blast_radius(key, claims=claims, tasks=tasks, uses=uses, now=at(90))


@given(runs(), st.data())
def test_adding_a_use_never_shrinks_a_radius(
    run: tuple[dict[str, ClaimFact], dict[str, TaskFact], list[ClaimUse]], data: st.DataObject
) -> None:
    claims, tasks, uses = run
    extra = data.draw(
        st.builds(use, st.sampled_from(sorted(claims)), st.sampled_from(sorted(tasks)), MINUTE)
    )

    before = blast_radii(claims=claims, tasks=tasks, uses=uses, now=at(90))
    after = blast_radii(claims=claims, tasks=tasks, uses=[*uses, extra], now=at(90))

    for key in claims:
        assert set(before[key].tasks) <= set(after[key].tasks)
        assert before[key].agents <= after[key].agents
        assert before[key].artifacts <= after[key].artifacts
        assert before[key].minutes == after[key].minutes


@given(runs(), st.data())
def test_a_claim_checked_before_any_use_reaches_no_task(
    run: tuple[dict[str, ClaimFact], dict[str, TaskFact], list[ClaimUse]], data: st.DataObject
) -> None:
    claims, tasks, uses = run
    key = data.draw(st.sampled_from(sorted(claims)))
    original = claims[key]
    checked = original.posted_at + timedelta(minutes=data.draw(st.integers(0, 10)))
    claims[key] = ClaimFact(
        key, original.producer_task, original.posted_at, checked, "verified", True
    )
    uses = [u for u in uses if u.claim != key or u.at >= checked]

    radius = blast_radius(key, claims=claims, tasks=tasks, uses=uses, now=at(90))

    assert radius.tasks == ()
    assert radius.agents == 0
    assert radius.artifacts == 0


@given(runs())
def test_no_radius_has_more_agents_than_tasks(
    run: tuple[dict[str, ClaimFact], dict[str, TaskFact], list[ClaimUse]],
) -> None:
    claims, tasks, uses = run

    for radius in blast_radii(claims=claims, tasks=tasks, uses=uses, now=at(90)).values():
        assert radius.agents <= len(radius.tasks)
        assert radius.minutes >= 0


@given(runs(), st.randoms(use_true_random=False))
def test_the_order_of_the_facts_does_not_matter(
    run: tuple[dict[str, ClaimFact], dict[str, TaskFact], list[ClaimUse]], shuffler: random.Random
) -> None:
    claims, tasks, uses = run
    shuffled_uses = list(uses)
    shuffler.shuffle(shuffled_uses)
    reordered_claims = dict(reversed(list(claims.items())))
    reordered_tasks = dict(reversed(list(tasks.items())))

    assert blast_radii(
        claims=reordered_claims, tasks=reordered_tasks, uses=shuffled_uses, now=at(90)
    ) == blast_radii(claims=claims, tasks=tasks, uses=uses, now=at(90))
    assert handoffs(
        claims=reordered_claims, tasks=reordered_tasks, uses=shuffled_uses, now=at(90)
    ) == handoffs(claims=claims, tasks=tasks, uses=uses, now=at(90))


@given(runs())
def test_every_handoff_crosses_agents_and_counts_within_its_claims(
    run: tuple[dict[str, ClaimFact], dict[str, TaskFact], list[ClaimUse]],
) -> None:
    claims, tasks, uses = run

    found = handoffs(claims=claims, tasks=tasks, uses=uses, now=at(90))

    assert found == sorted(found, key=lambda h: (h.producer, h.consumer))
    for handoff in found:
        assert handoff.producer != handoff.consumer
        assert 0 <= handoff.checkable <= handoff.claims
        assert 0 <= handoff.refuted <= handoff.claims
        assert handoff.median_unchecked_minutes is not None
