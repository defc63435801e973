"""The retry policy: DESIGN section 6 in order, the signal rule, and killed background work."""

import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runs.policy import (
    FAILURE_KINDS,
    AttemptView,
    BackgroundOutcome,
    Budget,
    Decision,
    Failure,
    RetryConfig,
    after_background_kill,
    backoff_delay,
    carry_on_line,
    decide,
    failure_cause,
)

NOW = datetime(2026, 10, 2, 12, 0, tzinfo=UTC)
CONFIG = RetryConfig()
NO_JITTER = RetryConfig(jitter=0)
ROOM = Budget(task_retries_used=0, fleet_retries_used=0, fleet_budget=100)
NON_TRANSIENT = tuple(kind for kind in FAILURE_KINDS if kind != "transient")
REFUTED = {"claim": "plan.customer_tier", "status": "refuted", "evidence": "0 rows"}


def attempt(
    number: int,
    kind: str | None = "reasoning",
    signature: str = "no-such-column",
    *,
    agent: str = "alice",
    prompt: str = "p1",
    context: str = "c1",
    outcome: str | None = None,
    capability: str | None = None,
    **flags: Any,
) -> AttemptView:
    """An attempt that failed with `kind` (or, with kind=None, one that ended as `outcome`)."""
    failure = None if kind is None else Failure(kind, signature, capability=capability)
    return AttemptView(
        number=number,
        agent=agent,
        prompt_hash=prompt,
        context_hash=context,
        outcome=outcome or ("failed" if kind else "succeeded"),
        failure=failure,
        **flags,
    )


def decision(
    *attempts: AttemptView,
    ground_truth: Sequence[Mapping[str, Any]] = (),
    budget: Budget = ROOM,
    config: RetryConfig = CONFIG,
    alternatives: Sequence[str] = ("bob",),
    tools: Sequence[str] = (),
    recent: int = 1,
    seed: int = 7,
) -> Decision:
    return decide(
        attempts=attempts,
        ground_truth=ground_truth,
        budget=budget,
        config=config,
        alternatives=alternatives,
        tools=tools,
        recent_capability_failures=recent,
        now=NOW,
        rng=random.Random(seed),
    )


def wait(result: Decision) -> float:
    assert result.not_before is not None
    return (result.not_before - NOW).total_seconds()


# Rule 1: transient failures are retried with the same context, with a backoff, within budget.


def test_it_retries_a_transient_failure_with_the_same_context_after_a_backoff() -> None:
    result = decision(attempt(1, "transient", "rate_limit"))

    assert result.action == "retry"
    assert 30 <= wait(result) < 45
    assert result.reason.startswith("Transient retry: attempt 1 failed with a transient failure")
    assert "(retry 1 of 3 for the task, 1 of 100 for the fleet)" in result.reason
    assert result.trip_capability is None


@pytest.mark.parametrize(
    ("streak", "seconds"),
    [(1, 30), (2, 60), (3, 120), (4, 240)],
    ids=["first", "second", "third", "fourth"],
)
def test_it_doubles_the_backoff_for_each_transient_failure_in_a_row(
    streak: int, seconds: float
) -> None:
    attempts = [attempt(n, "transient", "timeout") for n in range(1, streak + 1)]

    result = decision(*attempts, config=RetryConfig(task_budget=10, jitter=0))

    assert wait(result) == seconds


def test_it_restarts_the_backoff_after_a_failure_that_was_not_transient() -> None:
    attempts = [
        attempt(1, "transient", "timeout"),
        attempt(2, "reasoning", "wrong-column"),
        attempt(3, "transient", "timeout", reframed=True),
    ]

    assert wait(decision(*attempts, config=NO_JITTER)) == 30


def test_it_caps_the_backoff_at_the_max_delay_before_jitter() -> None:
    config = RetryConfig(base_delay_s=30, max_delay_s=100, jitter=0.5)

    delays = [backoff_delay(n, config, random.Random(n)) for n in range(1, 200)]

    assert all(30 <= delay < 150 for delay in delays)
    assert backoff_delay(10_000, RetryConfig(jitter=0), 1) == 3600


@pytest.mark.parametrize(
    ("budget", "spent"),
    [
        (Budget(3, 0, 100), "the task's retry budget is spent (3 of 3 used)"),
        (Budget(0, 100, 100), "the fleet's retry budget is spent (100 of 100 used)"),
        (Budget(0, 0, 0), "the fleet's retry budget is spent (0 of 0 used)"),
        (
            Budget(5, 7, 7),
            "the task's retry budget is spent (5 of 3 used) and the fleet's retry budget is "
            "spent (7 of 7 used)",
        ),
    ],
    ids=["task", "fleet", "fleet-without-retries", "both"],
)
def test_it_falls_through_to_the_next_rule_when_the_retry_budget_is_spent(
    budget: Budget, spent: str
) -> None:
    result = decision(attempt(1, "transient", "rate_limit"), budget=budget)

    assert result.action == "reframe"
    assert result.not_before is None
    assert f"but {spent}, so it is not retried with the same context." in result.reason
    assert "Reframe: attempt 1 failed" in result.reason


def test_it_trips_the_breaker_when_transient_failures_naming_a_capability_reach_the_threshold() -> (
    None
):
    result = decision(attempt(3, "transient", "forge-503", capability="forge"), recent=3)

    assert result.action == "retry"
    assert result.not_before is not None
    assert result.trip_capability == "forge"
    assert (
        "Circuit breaker: 3 transient failures named capability forge within 10 min "
        "(threshold 3), so forge is marked down and the scheduler holds the work that needs it "
        "(capability:forge) until it is back."
    ) in result.reason


@pytest.mark.parametrize(
    ("capability", "recent"),
    [("forge", 2), (None, 5)],
    ids=["below-the-threshold", "no-capability-named"],
)
def test_it_leaves_the_breaker_alone(capability: str | None, recent: int) -> None:
    result = decision(attempt(1, "transient", "x", capability=capability), recent=recent)

    assert result.action == "retry"
    assert result.trip_capability is None
    assert "Circuit breaker" not in result.reason


def test_it_still_trips_the_breaker_when_the_retry_budget_is_spent() -> None:
    result = decision(
        attempt(1, "transient", "forge-503", capability="forge"), budget=Budget(3, 0, 9), recent=4
    )

    assert result.action == "reframe"
    assert result.trip_capability == "forge"
    assert "Circuit breaker: 4 transient failures named capability forge" in result.reason


@pytest.mark.parametrize("kind", NON_TRANSIENT)
def test_it_never_retries_a_failure_that_was_not_transient_with_the_same_context(
    kind: str,
) -> None:
    histories = [
        [attempt(1, kind)],
        [attempt(1, kind), attempt(2, kind, reframed=True, prompt="p2")],
        [attempt(1, kind, "a"), attempt(2, kind, "b", reframed=True)],
        [attempt(1, kind, "a"), attempt(2, kind, "b", reframed=True), attempt(3, kind, "c")],
    ]
    for history in histories:
        result = decision(*history, recent=99)
        assert result.action != "retry"
        assert result.not_before is None
        assert result.trip_capability is None


# Rule 2: the signal rule.


@pytest.mark.parametrize(
    ("second", "difference"),
    [
        ({"prompt": "p2"}, "another prompt"),
        ({"context": "c2"}, "another context"),
        ({"prompt": "p2", "context": "c2"}, "another prompt and another context"),
    ],
    ids=["prompt", "context", "both"],
)
def test_it_escalates_when_two_differently_prompted_attempts_agree(
    second: dict[str, str], difference: str
) -> None:
    result = decision(attempt(1), attempt(2, reframed=True, **second))

    assert result.action == "escalate"
    assert result.reason == (
        f"Signal rule: attempts 1 and 2 were prompted differently ({difference}) and both "
        "failed with signature no-such-column; agreement between different attempts is "
        "information, so the problem is likely in the task, the spec or the environment, and "
        "a person is asked."
    )


def test_it_escalates_on_agreement_before_reframing_for_the_first_time() -> None:
    result = decision(attempt(1), attempt(2, prompt="p2"))

    assert result.action == "escalate"
    assert result.reason.startswith("Signal rule:")


def test_it_does_not_count_the_same_prompt_and_context_twice_as_agreement() -> None:
    result = decision(attempt(1), attempt(2))

    assert result.action == "reframe"
    assert (
        "Attempts 1 and 2 failed the same way with the same prompt and context, which is another "
        "vote, not agreement, so the signal rule does not count it."
    ) in result.reason


@pytest.mark.parametrize(
    "attempts",
    [
        [attempt(1, signature="a"), attempt(2, signature="b", prompt="p2")],
        [attempt(1, signature=""), attempt(2, signature="", prompt="p2")],
        [attempt(1, None), attempt(2, prompt="p2")],
        [attempt(1, kind=None, outcome="failed"), attempt(2, prompt="p2")],
    ],
    ids=["different-signatures", "no-signatures", "earlier-success", "no-earlier-details"],
)
def test_it_does_not_apply_the_signal_rule_without_two_failures_that_agree(
    attempts: list[AttemptView],
) -> None:
    assert decision(*attempts).action == "reframe"


def test_it_applies_the_signal_rule_to_transient_failures_once_the_budget_is_spent() -> None:
    attempts = [attempt(1, "transient", "timeout"), attempt(2, "transient", "timeout", prompt="p2")]

    result = decision(*attempts, budget=Budget(3, 0, 9))

    assert result.action == "escalate"
    assert "Signal rule: attempts 1 and 2 were prompted differently" in result.reason


# Rule 3: reframe.


def test_it_reframes_with_the_ground_truth_and_a_narrower_scope() -> None:
    failed = AttemptView(
        1, "alice", "p1", "c1", "failed", Failure("reasoning", "no-such-column", "customer_tier")
    )

    result = decision(failed, ground_truth=[REFUTED])

    assert result.action == "reframe"
    assert result.ground_truth == (REFUTED,)
    assert result.scope == (
        "Work only on the part that failed (no-such-column: customer_tier), taking the ground "
        "truth you are given as fact; leave the work that already succeeded as it is."
    )
    assert result.reason == (
        "Reframe: attempt 1 failed with a reasoning failure (no-such-column) and no attempt has "
        "been reframed yet; the next attempt gets 1 item of ground truth and a narrower scope."
    )


def test_it_reframes_on_scope_alone_when_no_ground_truth_is_recorded() -> None:
    result = decision(attempt(1, "environment", "missing-tool"))

    assert result.ground_truth == ()
    assert result.reason.endswith(
        "the next attempt gets a narrower scope (no ground truth is recorded for it yet)."
    )
    assert result.scope is not None
    assert "(missing-tool)" in result.scope


def test_it_copies_the_ground_truth_so_the_caller_cannot_change_the_decision() -> None:
    truth = dict(REFUTED)

    result = decision(attempt(1), ground_truth=[truth])
    truth["status"] = "verified"

    assert result.ground_truth == (REFUTED,)


def test_it_cuts_a_long_message_in_the_scope_sentence() -> None:
    long = AttemptView(1, "alice", "p", "c", "failed", Failure("spec", "", "x" * 5000))

    result = decision(long)

    assert result.scope is not None
    assert len(result.scope) < 400
    assert "…" in result.scope
    words = AttemptView(1, "alice", "p", "c", "failed", Failure("spec", "", "data " * 100))
    scope = decision(words).scope
    assert scope is not None and "data…" in scope and "da…" not in scope.replace("data…", "")


# Rule 4: reroute; rule 5: escalate.


@pytest.mark.parametrize(
    ("alternatives", "tools", "target", "said"),
    [
        (["bob", "charlie"], ["sql-lint"], "bob", "to agent bob, of the same role."),
        ([], ["sql-lint"], "tool:sql-lint", "to the deterministic tool sql-lint."),
        (["alice"], ["tool:schema-check"], "tool:schema-check", "the deterministic tool"),
        (["alice", "charlie"], [], "charlie", "to agent charlie"),
    ],
    ids=["an-agent-first", "a-tool", "a-tool-already-prefixed", "skips-who-tried"],
)
def test_it_reroutes_once_reframing_did_not_help(
    alternatives: list[str], tools: list[str], target: str, said: str
) -> None:
    attempts = [attempt(1, signature="a"), attempt(2, signature="b", reframed=True, prompt="p2")]

    result = decision(*attempts, alternatives=alternatives, tools=tools)

    assert result.action == "reroute"
    assert result.reroute_to == target
    assert result.reason.startswith(
        "Reroute: attempt 2 failed with a reasoning failure (b) after the task was reframed "
        "(attempt 2), and no attempt has been rerouted yet; the task goes from alice"
    )
    assert said in result.reason


def test_it_escalates_when_there_is_nobody_to_reroute_to() -> None:
    attempts = [attempt(1, signature="a"), attempt(2, signature="b", reframed=True)]

    result = decision(*attempts, alternatives=["alice"], tools=[])

    assert result.action == "escalate"
    assert result.reason == (
        "Escalate: attempt 2 failed with a reasoning failure (b), and it was reframed (attempt 2) "
        "and there is no other agent of the role and no deterministic tool to reroute it to; "
        "nothing is left to change without a person."
    )


def test_it_escalates_once_the_task_was_reframed_and_rerouted() -> None:
    attempts = [
        attempt(1, signature="a"),
        attempt(2, signature="b", reframed=True, prompt="p2"),
        attempt(3, signature="c", rerouted=True, agent="bob", prompt="p3"),
    ]

    result = decision(*attempts, alternatives=["charlie"], tools=["sql-lint"])

    assert result.action == "escalate"
    assert result.reason == (
        "Escalate: attempt 3 failed with a reasoning failure (c), and it was reframed (attempt 2) "
        "and rerouted (attempt 3); nothing is left to change without a person."
    )


def test_it_reframes_a_rerouted_task_that_was_never_reframed() -> None:
    attempts = [attempt(1, signature="a"), attempt(2, signature="b", rerouted=True, agent="bob")]

    assert decision(*attempts).action == "reframe"


# What decide refuses.


@pytest.mark.parametrize(
    "attempts",
    [[], [attempt(1, None)], [attempt(1, None, outcome=None)]],
    ids=["no-attempts", "succeeded", "running"],
)
def test_it_refuses_to_decide_without_a_failed_last_attempt(attempts: list[AttemptView]) -> None:
    with pytest.raises(ValueError, match="attempt"):
        decision(*attempts)


def test_it_refuses_an_unknown_failure_kind() -> None:
    with pytest.raises(ValueError, match="unknown failure kind 'flaky'"):
        Failure("flaky", "x")


def test_it_treats_a_failure_without_details_as_not_transient() -> None:
    result = decision(attempt(1, kind=None, outcome="failed"))

    assert result.action == "reframe"
    assert "a failure it gave no details of" in result.reason


# Killed background work: the cases of the seed PR.


def background(task: str, *attempts: AttemptView) -> BackgroundOutcome:
    return after_background_kill(task=task, attempts=attempts)


def left(number: int, *work: str, **fields: Any) -> AttemptView:
    """A session that ended its turn with background work still running, which was killed."""
    return attempt(number, None, background_killed=work, **fields)


def test_a_resume_that_ends_with_killed_background_work_is_warned_about_and_the_run_goes_on() -> (
    None
):
    first = background("implement", left(1, "./mvnw test", resumable=True))

    assert first.action == "resume"
    assert first.progress_line is None
    assert first.reason.startswith("Resume once: implement attempt 1 ended with a background task")

    again = background(
        "implement",
        left(1, "./mvnw test", resumable=True),
        left(2, "./mvnw test", resumable=True, resumed=True),
    )

    assert again.action == "carry_on"
    assert again.progress_line == (
        "implement: the Resume ended with a background task still running (./mvnw test), which "
        "was killed; carrying on"
    )
    assert again.killed == ("./mvnw test",)
    assert "implement, its Resume (attempt 2) ended" in again.reason
    assert again.reason.endswith("this is not a failure, and the attempt's outcome stands.")


def test_a_session_with_no_id_to_resume_that_ends_with_killed_background_work_is_warned_about_too() -> (
    None
):
    outcome = background("implement", left(1, "./mvnw test -Dtest=GamesPageTest"))

    assert outcome.action == "carry_on"
    # There was no session to resume: the line says so, not that a Resume ended.
    assert outcome.progress_line == (
        "implement: there was no session to resume; the session ended with a background task "
        "still running (./mvnw test -Dtest=GamesPageTest), which was killed; carrying on"
    )
    assert "its session cannot be resumed" in outcome.reason


def test_a_run_that_fails_after_a_resume_ended_with_killed_background_work_names_that_work_too() -> (
    None
):
    cause = failure_cause(killed=[("implement", ("./mvnw test",))], cause="no PR found")

    assert cause == (
        "implement session ended with a background task still running (./mvnw test), which was "
        "killed, and a later step failed: no PR found"
    )


def test_a_session_that_ends_in_an_error_with_killed_background_work_is_not_resumed_or_warned_about() -> (
    None
):
    errored = attempt(1, "error", "claude exited 3", background_killed=("./mvnw test",))

    outcome = background("implement", replace(errored, resumable=True))

    assert outcome.action == "none"
    assert outcome.progress_line is None
    assert outcome.killed == ()
    assert "ended in an error" in outcome.reason


def test_a_failed_attempt_that_carries_on_is_still_decided_by_the_retry_policy() -> None:
    # The seed's refused merge: carrying on names the killed work and does not hide the failure.
    failed = attempt(2, "spec", "merge-refused", background_killed=("lint",), resumed=True)

    outcome = background("deliver", attempt(1, None, resumable=True), failed)

    assert outcome.action == "carry_on"
    assert decision(attempt(1, None, resumable=True), failed).action == "reframe"


def test_a_resume_is_decided_on_by_its_own_outcome() -> None:
    # The seed's review read by the Resume's final message: the Resume is the attempt that counts.
    attempts = [
        left(1, "pytest", resumable=True),
        attempt(2, "reasoning", "plan-unchecked", resumed=True, background_killed=("pytest",)),
    ]

    assert background("review", *attempts).action == "carry_on"
    assert decision(*attempts).reason.startswith("Reframe: attempt 2 failed")


@pytest.mark.parametrize(
    ("attempts", "action", "why"),
    [
        ([left(1, "a", resumable=True)], "resume", "Resume once"),
        ([left(1, "a", resumable=True, resumed=True)], "carry_on", "its Resume (attempt 1)"),
        (
            [
                left(1, "a", resumable=True),
                attempt(2, None, resumed=True),
                left(3, "b", resumable=True),
            ],
            "carry_on",
            "its session already had its one Resume (attempt 2)",
        ),
        ([left(1, resumable=True)], "none", ""),
        ([attempt(1, None, resumable=True)], "none", ""),
        ([], "none", ""),
        ([left(1, "a", resumable=True), attempt(2, None, resumed=True)], "none", ""),
    ],
    ids=[
        "first-kill-is-resumed",
        "a-resume-that-ends-the-same-way",
        "never-a-second-resume",
        "nothing-killed",
        "no-background-work",
        "no-attempts",
        "a-resume-that-finished-its-work",
    ],
)
def test_it_resumes_killed_background_work_once(
    attempts: list[AttemptView], action: str, why: str
) -> None:
    outcome = background("implement", *attempts)

    assert outcome.action == action
    assert why in outcome.reason
    assert (outcome.progress_line is not None) == (action == "carry_on")


def test_it_names_every_killed_background_task_once() -> None:
    outcome = background(
        "implement",
        left(1, "./mvnw test", resumable=True),
        left(2, "./mvnw test", "npm run watch", "./mvnw test", resumed=True),
    )

    assert outcome.killed == ("./mvnw test", "npm run watch")
    assert outcome.progress_line == (
        "implement: the Resume ended with a background task still running "
        "(./mvnw test, npm run watch), which was killed; carrying on"
    )


@pytest.mark.parametrize(
    ("killed", "expected"),
    [
        ([], "no PR found"),
        ([("implement", ())], "no PR found"),
        (
            [("implement", ("./mvnw test",)), ("review", ("pytest", "tsc --watch"))],
            "implement session ended with a background task still running (./mvnw test), which "
            "was killed, and review session ended with a background task still running (pytest, "
            "tsc --watch), which was killed, and a later step failed: no PR found",
        ),
        (
            [("implement", ("./mvnw test",)), ("implement", ("./mvnw test",))],
            "implement session ended with a background task still running (./mvnw test), which "
            "was killed, and a later step failed: no PR found",
        ),
    ],
    ids=["nothing-killed", "a-record-without-work", "several-chained-in-order", "a-record-twice"],
)
def test_a_later_failure_names_the_killed_work_ahead_of_its_cause(
    killed: list[tuple[str, tuple[str, ...]]], expected: str
) -> None:
    assert failure_cause(killed=killed, cause="no PR found") == expected


def test_naming_the_killed_work_twice_does_not_repeat_it() -> None:
    killed = [("implement", ("./mvnw test",))]
    once = failure_cause(killed=killed, cause="no PR found")

    assert failure_cause(killed=killed, cause=once) == once


@pytest.mark.parametrize("fresh", ["reframed", "rerouted"])
def test_a_reframed_or_rerouted_attempt_is_a_new_session_with_its_own_resume(fresh: str) -> None:
    # Attempt 1 had the task's first session's Resume (attempt 2); attempt 3 is a new session.
    attempts = [
        left(1, "./mvnw test", resumable=True),
        attempt(2, "reasoning", "no-pr", resumed=True),
        left(3, "./mvnw test", resumable=True, **{fresh: True}),
    ]

    first = background("implement", *attempts)

    assert first.action == "resume"
    assert first.reason.startswith("Resume once: implement attempt 3 ended")

    again = background("implement", *attempts, left(4, "./mvnw test", resumed=True))

    assert again.action == "carry_on"
    assert again.progress_line is not None
    assert again.progress_line.startswith("implement: the Resume ended with")
    assert "its Resume (attempt 4)" in again.reason


def test_a_retry_in_a_session_that_had_its_resume_is_not_resumed_again() -> None:
    # No reframe or reroute in between: the same session, which already had its one Resume.
    attempts = [
        left(1, "./mvnw test", resumable=True),
        attempt(2, "transient", "timeout", resumed=True),
        left(3, "./mvnw test", resumable=True),
    ]

    outcome = background("implement", *attempts)

    assert outcome.action == "carry_on"
    assert outcome.progress_line == (
        "implement: the session, which already had its one Resume, ended with a background "
        "task still running (./mvnw test), which was killed; carrying on"
    )


def test_the_progress_line_and_the_cause_use_the_same_words_for_the_work() -> None:
    assert carry_on_line("implement", ["a", "b"]).endswith("(a, b), which was killed; carrying on")


# Properties.

AGENTS = ("alice", "bob", "charlie", "tool:sql-lint")
CAPABILITIES = (None, "forge", "warehouse")
RARELY = st.sampled_from((False, False, False, True))


@st.composite
def failures(draw: st.DrawFn) -> Failure:
    return Failure(
        # Transient half the time, so that the retry properties see plenty of retries.
        kind=draw(st.sampled_from(FAILURE_KINDS[:1] * 4 + FAILURE_KINDS[1:])),
        signature=draw(st.sampled_from(("", "sig-a", "sig-b"))),
        message=draw(st.sampled_from(("", "it broke"))),
        capability=draw(st.sampled_from(CAPABILITIES)),
    )


@st.composite
def histories(draw: st.DrawFn) -> list[AttemptView]:
    """A task's attempts, oldest first; the last one failed."""
    count = draw(st.integers(1, 6))
    views = []
    for number in range(1, count + 1):
        outcome = "failed" if number == count else draw(st.sampled_from(("failed", "succeeded")))
        failure = draw(failures()) if outcome == "failed" else None
        if number == count:
            failure = draw(st.sampled_from((failure, failure, failure, None)))
        views.append(
            AttemptView(
                number=number,
                agent=draw(st.sampled_from(AGENTS)),
                prompt_hash=draw(st.sampled_from(("p1", "p2"))),
                context_hash=draw(st.sampled_from(("c1", "c2"))),
                outcome=outcome,
                failure=failure,
                reframed=draw(RARELY),
                rerouted=draw(RARELY),
                resumed=draw(RARELY),
                background_killed=draw(
                    st.lists(st.sampled_from(("t1", "t2")), max_size=2).map(tuple)
                ),
                resumable=draw(st.booleans()),
            )
        )
    return views


@st.composite
def configs(draw: st.DrawFn) -> RetryConfig:
    base = draw(st.floats(0.01, 1000))
    return RetryConfig(
        task_budget=draw(st.integers(0, 9)),
        base_delay_s=base,
        max_delay_s=base * draw(st.floats(1, 1000)),
        jitter=draw(st.floats(0, 2)),
        breaker_threshold=draw(st.integers(1, 5)),
    )


@st.composite
def situations(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "attempts": draw(histories()),
        "ground_truth": draw(st.lists(st.just(REFUTED), max_size=2)),
        "budget": Budget(draw(st.integers(0, 4)), draw(st.integers(0, 4)), draw(st.integers(0, 9))),
        "config": draw(configs()),
        "alternatives": draw(st.lists(st.sampled_from(AGENTS[:3]), max_size=3)),
        "tools": draw(st.lists(st.sampled_from(("sql-lint", "schema-check")), max_size=2)),
        "recent_capability_failures": draw(st.integers(0, 6)),
        "now": NOW,
    }


def run_policy(situation: dict[str, Any], seed: int = 0) -> Decision:
    return decide(**situation, rng=random.Random(seed))


def is_transient(view: AttemptView) -> bool:
    return view.failure is not None and view.failure.kind == "transient"


@given(situations())
def test_it_never_retries_with_the_same_context_unless_the_failure_was_transient(
    situation: dict[str, Any],
) -> None:
    result = run_policy(situation)

    if not is_transient(situation["attempts"][-1]):
        assert result.action in ("reframe", "reroute", "escalate")
        assert result.not_before is None


@given(situations())
def test_the_signal_rule_fires_exactly_when_differently_prompted_attempts_agree(
    situation: dict[str, Any],
) -> None:
    attempts = situation["attempts"]
    result = run_policy(situation)

    agree = False
    if len(attempts) >= 2:
        previous, last = attempts[-2], attempts[-1]
        agree = (
            previous.outcome == "failed"
            and previous.failure is not None
            and last.failure is not None
            and last.failure.signature != ""
            and previous.failure.signature == last.failure.signature
            and (previous.prompt_hash, previous.context_hash)
            != (last.prompt_hash, last.context_hash)
        )
    fired = "Signal rule:" in result.reason
    assert fired == (agree and result.action != "retry")
    if fired:
        assert result.action == "escalate"


@given(situations())
def test_it_never_retries_past_the_task_or_the_fleet_budget(situation: dict[str, Any]) -> None:
    result = run_policy(situation)

    if result.action == "retry":
        budget, config = situation["budget"], situation["config"]
        assert budget.task_retries_used + 1 <= config.task_budget
        assert budget.fleet_retries_used + 1 <= budget.fleet_budget


@given(situations(), st.integers(0, 2**32))
def test_a_retry_waits_between_the_base_delay_and_the_jittered_cap(
    situation: dict[str, Any], seed: int
) -> None:
    result = run_policy(situation, seed)
    config = situation["config"]

    if result.action == "retry":
        seconds = wait(result)
        assert (
            config.base_delay_s - 1e-6 <= seconds <= config.max_delay_s * (1 + config.jitter) + 1e-6
        )
    else:
        assert result.not_before is None


@given(situations())
def test_it_trips_the_breaker_exactly_when_transient_failures_reach_the_threshold_or_spend_the_budget(
    situation: dict[str, Any],
) -> None:
    last = situation["attempts"][-1]
    result = run_policy(situation)

    expected = (
        last.failure.capability
        if is_transient(last)
        and last.failure is not None
        and (
            situation["recent_capability_failures"] >= situation["config"].breaker_threshold
            or situation["budget"].task_retries_used >= situation["config"].task_budget
        )
        else None
    )
    assert result.trip_capability == expected


@given(situations(), st.integers(0, 2**32))
def test_decisions_are_the_same_for_the_same_seed(situation: dict[str, Any], seed: int) -> None:
    assert run_policy(situation, seed) == run_policy(situation, seed)
    assert decide(**situation, rng=seed) == run_policy(situation, seed)


@given(st.integers(1, 10_000), configs(), st.integers(0, 2**32))
def test_the_backoff_stays_within_its_bounds(number: int, config: RetryConfig, seed: int) -> None:
    delay = backoff_delay(number, config, random.Random(seed))

    assert config.base_delay_s <= delay <= config.max_delay_s * (1 + config.jitter)
    assert backoff_delay(number, config, seed) == delay


@given(st.integers(1, 60), configs())
def test_the_backoff_never_shrinks_without_jitter(number: int, config: RetryConfig) -> None:
    flat = RetryConfig(base_delay_s=config.base_delay_s, max_delay_s=config.max_delay_s, jitter=0)

    assert backoff_delay(number, flat, 0) <= backoff_delay(number + 1, flat, 0)


@given(histories())
def test_killed_background_work_is_resumed_at_most_once_per_session(
    attempts: list[AttemptView],
) -> None:
    # Play the task forward: each resume decision makes the next attempt a Resume. A reframed or
    # rerouted attempt starts a new session, which may have its own one Resume.
    played: list[AttemptView] = []
    resumes = [0]
    for view in attempts:
        resumed = (
            bool(played) and after_background_kill(task="t", attempts=played).action == "resume"
        )
        view = replace(view, resumed=resumed)
        if resumed:
            view = replace(view, reframed=False, rerouted=False)  # a Resume is the same session
        if view.reframed or view.rerouted:
            resumes.append(0)
        played.append(view)
        resumes[-1] += resumed
    assert max(resumes) <= 1

    outcome = after_background_kill(task="t", attempts=attempts)
    last = attempts[-1]
    if last.failure is not None and last.failure.kind == "error" or not last.background_killed:
        assert (outcome.action, outcome.progress_line, outcome.killed) == ("none", None, ())
    fresh = max((i for i, v in enumerate(attempts) if v.reframed or v.rerouted), default=0)
    if any(view.resumed for view in attempts[fresh:]):
        assert outcome.action != "resume"


@given(
    st.lists(
        st.tuples(
            st.sampled_from(("implement", "review")),
            st.lists(st.sampled_from(("pytest", "tsc")), max_size=2).map(tuple),
        ),
        max_size=4,
    ),
    st.text(max_size=20),
)
def test_a_later_cause_always_ends_with_its_own_words(
    killed: list[tuple[str, tuple[str, ...]]], cause: str
) -> None:
    named = failure_cause(killed=killed, cause=cause)

    assert named.endswith(cause)
    for task, work in killed:
        if work:
            assert (
                f"{task} session ended with a background task still running ({', '.join(work)})"
                in named
            )
    assert failure_cause(killed=killed, cause=named) == named


def test_the_default_config_matches_the_contract() -> None:
    defaults = RetryConfig()

    assert (defaults.task_budget, defaults.base_delay_s, defaults.max_delay_s) == (3, 30, 3600)
    assert (defaults.jitter, defaults.breaker_threshold, defaults.breaker_window_s) == (0.5, 3, 600)


def test_a_task_whose_retries_are_spent_on_a_capability_hands_it_to_the_scheduler() -> None:
    # Slow failures: the breaker's window never holds three of them, but the budget is spent.
    result = decision(
        attempt(4, "transient", "forge-503", capability="forge"), budget=Budget(3, 0, 9), recent=1
    )

    assert result.trip_capability == "forge"
    assert result.not_before is None
    assert (
        "Circuit breaker: the task's retries are spent on transient failures naming capability "
        "forge, so forge is marked down and the scheduler holds the work that needs it "
        "(capability:forge) until it is back."
    ) in result.reason


def test_a_tool_fails_the_run_unless_the_task_was_rerouted_to_it() -> None:
    own = [attempt(1, "environment", "exit-2", agent="tool:gofmt")]
    result = decide(
        attempts=own, ground_truth=(), budget=ROOM, config=CONFIG, alternatives=(), tools=(),
        recent_capability_failures=0, now=NOW, rng=random.Random(1), tool="gofmt",
    )  # fmt: skip
    assert result.action == "abort"

    handed = [
        attempt(1, prompt="p1"),
        attempt(2, prompt="p2", reframed=True),
        attempt(3, "environment", "exit-2", agent="tool:gofmt", prompt="p3", rerouted=True),
    ]
    result = decide(
        attempts=handed, ground_truth=(), budget=ROOM, config=CONFIG, alternatives=(), tools=(),
        recent_capability_failures=0, now=NOW, rng=random.Random(1), tool="gofmt",
    )  # fmt: skip
    assert result.action == "escalate"
