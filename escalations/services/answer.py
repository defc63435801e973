"""A reviewer answers the packet's one question: the answer reframes the task and releases work."""

from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from escalations.models import Answer, Escalation, JoinedTask
from escalations.services import joining
from escalations.services.state import (
    ANSWER_MAX_CHARS,
    AlreadyActed,
    close,
    hold_of,
    options_of,
    question_of,
    refuse_unless_open,
    refuse_unless_running,
)
from fleet.errors import Refusal
from fleet.outbox import notify
from runs import human_decisions
from runs.models import Claim, Run, Task


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
    run, task, escalation, joined = lock_for_answer(escalation.pk)
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
    released = list(reframed.released)
    answered = [{"run": run.key, "task": task.key}]
    for row in joined:
        other = release_joined(
            row, run=run, escalation=escalation, reviewer=reviewer, answer=answer_text, at=now
        )
        if other is None:
            continue
        answered.append({"run": row.task.run.key, "task": row.task.key})
        released += [k if row.task.run_id == run.pk else f"{row.task.run.key}/{k}" for k in other]
    released = list(dict.fromkeys(released))  # two tasks of one run may release the same one
    answer.released = released
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
            "released": released,
            "tasks": answered,
        },
    )
    return Answered(answer=answer, released=released, blockers=reframed.blockers)


class JoinsChanged(Exception):
    """A task joined (or left) between reading the escalation's tasks and locking them."""


def lock_for_answer(escalation_id: int) -> tuple[Run, Task, Escalation, list[JoinedTask]]:
    """Every run, then every task waiting on the escalation (its own and the joined ones), then
    the escalation: the order the work and the desk lock in, so an answer and a join (or a
    split) wait for each other instead of deadlocking. A join that slips in between the read and
    the locks rolls the locks back and the read is done again."""
    for _ in range(10):
        try:
            with transaction.atomic():
                return locked_for_answer(escalation_id)
        except JoinsChanged:
            continue
    raise Refusal("Tasks keep joining this escalation: answer it again in a moment.", status=409)


def locked_for_answer(escalation_id: int) -> tuple[Run, Task, Escalation, list[JoinedTask]]:
    run_id, task_id = Escalation.objects.values_list("run_id", "task_id").get(pk=escalation_id)
    waiting = JoinedTask.objects.filter(escalation_id=escalation_id, left_at__isnull=True)
    before = sorted(waiting.values_list("task_id", "task__run_id"))
    run_ids = sorted({run_id, *(r for _, r in before)})
    task_ids = sorted({task_id, *(t for t, _ in before)})
    runs = {
        r.pk: r
        for r in Run.objects.select_for_update(of=("self",))
        .select_related("fleet")
        .filter(pk__in=run_ids)
        .order_by("pk")
    }
    tasks = {
        t.pk: t
        for t in Task.objects.select_for_update(of=("self",))
        .select_related("agent")
        .filter(pk__in=task_ids)
        .order_by("pk")
    }
    escalation = (
        Escalation.objects.select_for_update(of=("self",))
        .select_related("claimed_by", "packet")
        .get(pk=escalation_id)
    )
    if sorted(waiting.values_list("task_id", "task__run_id")) != before:
        raise JoinsChanged
    joined = list(waiting.select_related("packet").order_by("joined_at", "id"))
    for row in joined:
        row.task = tasks[row.task_id]
        row.task.run = runs[row.task.run_id]
    return runs[run_id], tasks[task_id], escalation, joined


def release_joined(
    row: JoinedTask, *, run: Run, escalation: Escalation, reviewer: Any, answer: str, at: Any
) -> list[str] | None:
    """The answer reframes a joined task too, with its own question; a task whose run is over
    (or that no longer waits) leaves without it. Returns what it released, or None."""
    task, its_run = row.task, row.task.run
    if its_run.state != Run.State.RUNNING or task.state != Task.State.ESCALATED:
        joining.leave(
            row,
            left=JoinedTask.Left.CLOSED,
            note=f"not answered: {task.key} is {task.state} and its run {its_run.state}",
            at=at,
        )
        return None
    question = (row.packet.smallest_unblocking_question if row.packet else "") or question_of(
        escalation
    )
    base = f"answer.escalation-{escalation.pk}"
    key = base
    if Claim.objects.filter(run=its_run, key=base).exists():
        key = f"{base}.{task.key}" if len(base) + len(task.key) < 200 else f"{base}.task-{task.pk}"
    reframed = human_decisions.answer_reframe(
        run=its_run,
        task=task,
        hold=hold_of(escalation),
        escalation=escalation.pk,
        reviewer=reviewer.get_username(),
        question=question,
        answer=answer,
        at=at,
        claim_key=key,
    )
    joining.leave(
        row,
        left=JoinedTask.Left.ANSWERED,
        note=f"answered by {reviewer.get_username()} with {escalation.task.key}",
        at=at,
        lift=False,
    )
    if its_run.pk != run.pk:
        notify(
            its_run.fleet,
            "escalation.answered",
            {
                "escalation": escalation.pk,
                "run": its_run.key,
                "task": task.key,
                "question": question,
                "answer": answer,
                "by": f"reviewer:{reviewer.get_username()}",
                "released": reframed.released,
                "joined": True,
            },
        )
    return reframed.released
