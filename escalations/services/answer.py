"""A reviewer answers the packet's one question: the answer reframes the task and releases work."""

from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from escalations.models import Answer, Escalation
from escalations.services.state import (
    ANSWER_MAX_CHARS,
    AlreadyActed,
    close,
    hold_of,
    lock_for_action,
    options_of,
    question_of,
    refuse_unless_open,
    refuse_unless_running,
)
from fleet.errors import Refusal
from fleet.outbox import notify
from runs import human_decisions
from runs.models import Run, Task


@dataclass(frozen=True)
class Answered:
    answer: Answer
    released: list[str]
    blockers: list[str]  # what the reframed task still waits on, if anything


def answer_text_of(text: str, option: str) -> str:
    """An option with a note is both; the option's own words typed again are just the option."""
    return f"{option}: {text}" if option and text and text != option else (text or option)


def refuse_unless_answerable(
    run: Run, task: Task, escalation: Escalation, *, text: str, option: str
) -> None:
    if option and option not in options_of(escalation):
        raise Refusal("Choose one of the packet's options, or write the answer.", status=422)
    if not text and not option:
        raise Refusal("Write the answer (or choose an option) before releasing.", status=422)
    if len(text) > ANSWER_MAX_CHARS:
        raise Refusal(
            f"The answer is {len(text):,} characters; keep it under {ANSWER_MAX_CHARS:,}: "
            "the agent needs the one fact, not an essay.",
            status=422,
        )
    refuse_unless_running(run, "an answer cannot release anything; abort to close it.")
    if task.state != Task.State.ESCALATED:
        raise Refusal(
            f"The task {task.key} is {task.state}, not waiting for an answer.", status=409
        )


@transaction.atomic
def escalation_answer(
    *, escalation: Escalation, reviewer: Any, text: str, option: str | None = None
) -> Answered:
    """Answer the packet's question: a verified claim, a reframed next attempt, the work released.

    One transaction, one call into the work; the frontier recompute and the notifications go out
    after its commit. One answer per escalation: whoever comes second gets `AlreadyActed` naming
    who answered and when.
    """
    text, option = text.strip(), (option or "").strip()
    now = timezone.now()
    run, task, escalation = lock_for_action(escalation.pk)
    refuse_unless_open(escalation, reviewer, now)
    refuse_unless_answerable(run, task, escalation, text=text, option=option)
    answer_text = answer_text_of(text, option)
    try:
        with transaction.atomic():
            answer = Answer.objects.create(
                escalation=escalation,
                reviewer=reviewer,
                text=answer_text,
                option=option,
                answered_at=now,
            )
    except IntegrityError:
        escalation.refresh_from_db()
        raise AlreadyActed(escalation) from None
    question = question_of(escalation) or escalation.reason
    close(escalation, reviewer, Escalation.Status.ANSWERED, now)
    reframed = human_decisions.answer_reframe(
        run=run,
        task=task,
        hold=hold_of(escalation),
        escalation=escalation.pk,
        reviewer=reviewer.get_username(),
        question=question,
        answer=answer_text,
        at=now,
    )
    answer.released = reframed.released
    answer.save(update_fields=["released"])
    notify(
        run.fleet,
        "escalation.answered",
        {
            "escalation": escalation.pk,
            "run": run.key,
            "task": task.key,
            "question": question,
            "answer": answer_text,
            "by": f"reviewer:{reviewer.get_username()}",
            "released": reframed.released,
        },
    )
    return Answered(answer=answer, released=reframed.released, blockers=reframed.blockers)
