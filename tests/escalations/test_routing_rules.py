"""The pure rules of routing: the first matching rule, the pool's turn, due times and tiers."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from escalations import routing
from escalations.routing import About, DueRule, Rule, Seat, Step, Timing

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
ABOUT = About(
    agent_role="planning", capabilities=("forge",), run="tier-discounts", failure_kind="reasoning"
)


def test_it_routes_to_the_first_matching_rule_by_position() -> None:
    rules = [
        Rule(id=1, position=5),
        Rule(id=2, position=1, agent_role="coding"),
        Rule(id=3, position=2, capability="forge", failure_kind="reasoning"),
    ]
    assert routing.route(rules, ABOUT) == rules[2]
    assert routing.route(rules, About("x", (), "r", "transient")) == rules[0]
    assert routing.route([Rule(id=1, position=0, run="other")], ABOUT) is None


def test_the_least_recently_assigned_reviewer_who_is_not_away_is_next() -> None:
    seats = [
        Seat(1, T0 + timedelta(minutes=5)),
        Seat(2, T0 + timedelta(minutes=1)),
        Seat(3, T0, away=True),
    ]
    assert routing.next_reviewer(seats) == 2
    assert routing.next_reviewer([*seats, Seat(4, None)]) == 4
    assert routing.next_reviewer([Seat(3, T0, away=True)]) is None


def test_assignment_rotates_across_the_pool() -> None:
    last: dict[int, datetime | None] = {7: None, 8: None, 9: None}
    chosen = []
    for minute in range(6):
        pick = routing.next_reviewer(Seat(u, at) for u, at in last.items())
        assert pick is not None
        chosen.append(pick)
        last[pick] = T0 + timedelta(minutes=minute)
    assert chosen == [7, 8, 9, 7, 8, 9]


def test_due_times_by_failure_kind_or_urgency_the_earliest_wins() -> None:
    rules = [DueRule(240), DueRule(60, failure_kind="reasoning"), DueRule(30, urgency="high")]
    assert routing.due_minutes(rules, failure_kind="reasoning", urgency="") == 60
    assert routing.due_minutes(rules, failure_kind="reasoning", urgency="high") == 30
    assert routing.due_minutes(rules, failure_kind="transient", urgency="low") == 240
    assert (
        routing.due_minutes([DueRule(60, urgency="high")], failure_kind="", urgency="low") is None
    )


def timing(
    tier: int = 1, last_tier: int = 3, done: frozenset[tuple[str, int]] = frozenset()
) -> Timing:
    return Timing(
        opened_at=T0, due_at=T0 + timedelta(hours=1), tier=tier, last_tier=last_tier, done=done
    )


def test_it_reminds_at_half_time_then_moves_up_when_overdue_each_once() -> None:
    assert routing.next_step(timing(), T0 + timedelta(minutes=29)) is None
    assert routing.next_step(timing(), T0 + timedelta(minutes=30)) == Step(
        "reminder", 1, T0 + timedelta(minutes=30)
    )
    reminded = frozenset({("reminder", 1)})
    assert routing.next_step(timing(done=reminded), T0 + timedelta(minutes=59)) is None
    assert routing.next_step(timing(done=reminded), T0 + timedelta(minutes=60)) == Step(
        "tier", 2, T0 + timedelta(hours=1)
    )
    # Tier 2 has its own window: reminded half-way, moved to the managers at its deadline.
    moved = reminded | {("tier", 2)}
    assert routing.next_step(timing(2, done=moved), T0 + timedelta(minutes=90)) == Step(
        "reminder", 2, T0 + timedelta(minutes=90)
    )
    assert routing.next_step(
        timing(2, done=moved | {("reminder", 2)}), T0 + timedelta(hours=2)
    ) == Step("tier", 3, T0 + timedelta(hours=2))


def test_overdue_at_the_last_tier_stays_overdue_and_nothing_else_happens() -> None:
    done = frozenset({("reminder", 1), ("tier", 2), ("reminder", 2)})
    assert routing.next_step(timing(2, last_tier=2, done=done), T0 + timedelta(days=30)) is None
    assert routing.when_next(timing(2, last_tier=2, done=done), T0 + timedelta(days=30)) is None
    assert routing.overdue(T0, T0) and not routing.overdue(None, T0)


def test_a_missed_reminder_is_not_sent_once_the_tier_is_overdue() -> None:
    assert routing.next_step(timing(), T0 + timedelta(hours=5)) == Step(
        "tier", 2, T0 + timedelta(hours=1)
    )
    assert routing.when_next(timing(), T0 + timedelta(hours=5)) == T0 + timedelta(hours=1)


@given(st.lists(st.integers(min_value=0, max_value=600), min_size=1, max_size=40))
def test_the_sweep_never_makes_a_step_twice(minutes: list[int]) -> None:
    """Whatever the times the sweep runs at, each (kind, tier) happens at most once, in order."""
    state = timing()
    made: list[tuple[str, int]] = []
    for minute in sorted(minutes):
        now = T0 + timedelta(minutes=minute)
        while (step := routing.next_step(state, now)) is not None:
            made.append((step.kind, step.tier))
            state = Timing(
                state.opened_at,
                state.due_at,
                step.tier if step.kind == "tier" else state.tier,
                state.last_tier,
                state.done | {(step.kind, step.tier)},
            )
    assert len(made) == len(set(made))
    tiers = [t for k, t in made if k == "tier"]
    assert tiers == sorted(tiers)


@given(
    st.integers(min_value=1, max_value=3),
    st.integers(min_value=1, max_value=3),
    st.frozensets(st.tuples(st.sampled_from(["reminder", "tier"]), st.integers(1, 3))),
    st.integers(min_value=0, max_value=600),
)
def test_the_sweep_looks_again_no_later_than_the_next_due_step(tier, extra, done, minute) -> None:
    """When a step is due, the time the sweep looks again (next_step_at) has come."""
    state = timing(tier=tier, last_tier=tier + extra - 1, done=done)
    now = T0 + timedelta(minutes=minute)
    step = routing.next_step(state, now)
    after = routing.when_next(state, now)
    if step is not None:
        assert after is not None and after <= now
