"""Killed background work: one Resume with the same context, then a progress line. Pure."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from runs.policy_attempts import AttemptView

BACKGROUND_ACTIONS: Final = ("resume", "carry_on", "none")


@dataclass(frozen=True, slots=True)
class BackgroundOutcome:
    action: str  # one of BACKGROUND_ACTIONS
    progress_line: str | None  # carry_on: the line the run records
    killed: tuple[str, ...]  # the killed background work, for the record and a later cause
    reason: str = ""  # shown on the run's timeline for a resume or carry_on decision

    def __post_init__(self) -> None:
        if self.action not in BACKGROUND_ACTIONS:
            raise ValueError(f"unknown background outcome {self.action!r}")


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
    session = _session(attempts)
    earlier_resume = next((a for a in session if a.resumed), None)
    if last.resumable and earlier_resume is None:
        return BackgroundOutcome(
            action="resume",
            progress_line=None,
            killed=killed,
            reason=(
                f"Resume once: {task} attempt {last.number} ended with a background task still "
                f"running ({', '.join(killed)}), which was killed; the session may have been "
                "waiting on it, so it is resumed once with the same context."
            ),
        )
    why = _why_not_resumed(last, earlier_resume, killed)
    return BackgroundOutcome(
        action="carry_on",
        progress_line=carry_on_line(task, killed, ended=_how_it_ended(last, earlier_resume)),
        killed=killed,
        reason=f"Carry on: {task}, {why}; this is not a failure, and the attempt's outcome stands.",
    )


def carry_on_line(task: str, killed: Sequence[str], *, ended: str = "resume") -> str:
    """The progress line a run records when it carries on past killed background work.

    `ended`: "resume" (the session's Resume ended that way), "no_session" (there was no session
    to resume: the agent said it cannot be resumed), or "after_resume" (a later attempt of a
    session that already had its one Resume).
    """
    work = f"a background task still running ({', '.join(killed)}), which was killed"
    if ended == "no_session":
        return f"{task}: there was no session to resume; the session ended with {work}; carrying on"
    if ended == "after_resume":
        return (
            f"{task}: the session, which already had its one Resume, ended with {work}; carrying on"
        )
    return f"{task}: the Resume ended with {work}; carrying on"


def _how_it_ended(last: AttemptView, earlier_resume: AttemptView | None) -> str:
    if last.resumed:
        return "resume"
    return "after_resume" if earlier_resume is not None else "no_session"


def _session(attempts: Sequence[AttemptView]) -> Sequence[AttemptView]:
    """The attempts of the last attempt's session: a reframed or rerouted attempt starts a new
    session (new context, or another agent), which gets its own one Resume."""
    start = 0
    for index, attempt in enumerate(attempts):
        if attempt.reframed or attempt.rerouted:
            start = index
    return attempts[start:]


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


def _why_not_resumed(
    last: AttemptView, earlier_resume: AttemptView | None, killed: tuple[str, ...]
) -> str:
    """Why the last attempt carries on rather than being resumed: it was the Resume, the task
    already had its one Resume, or its session cannot be resumed."""
    work = ", ".join(killed)
    if last.resumed:
        return (
            f"its Resume (attempt {last.number}) ended with a background task still running "
            f"({work}), which was killed; the work may have been abandoned rather than awaited"
        )
    if earlier_resume is not None:
        return (
            f"attempt {last.number} ended with a background task still running ({work}), which "
            f"was killed, and its session already had its one Resume "
            f"(attempt {earlier_resume.number})"
        )
    return (
        f"attempt {last.number} ended with a background task still running ({work}), which "
        "was killed, and its session cannot be resumed"
    )
