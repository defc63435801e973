"""A reviewer answers the packet's one question: the answer reframes the task and releases work."""

from dataclasses import dataclass
from functools import cache
from typing import Any, cast

from django.db import IntegrityError, OperationalError, connection, transaction
from django.utils import timezone

from escalations import tasks
from escalations.models import Answer, Escalation, FailurePacket, JoinedTask
from escalations.services import joining
from escalations.services.state import (
    ANSWER_MAX_CHARS,
    AlreadyActed,
    closing,
    hold_of,
    options_of,
    question_of,
    refuse_unless_open,
    refuse_unless_running,
)
from fleet import rows
from fleet.broker import after_commit
from fleet.errors import Refusal, rolled_back
from fleet.models import Agent, Delivery, Fleet
from fleet.outbox import held, prepared, send_after_commit
from fleet.prepared import prepared_cursor
from fleet.together import Insert, Update, together
from runs import human_decisions, scheduler
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
    options = options_of(escalation)
    if option and option not in options:
        if not options:
            raise Refusal("This packet offers no options: write the answer.", status=422)
        raise Refusal("Choose one of the packet's options, or write the answer.", status=422)
    if not text and not option:
        choose = " (or choose an option)" if options else ""
        raise Refusal(f"Write the answer{choose} before releasing.", status=422)
    if len(text) > ANSWER_MAX_CHARS:
        raise Refusal(
            f"The answer is {len(text):,} characters; it may have at most {ANSWER_MAX_CHARS:,}: "
            "the agent needs the one fact, not an essay.",
            status=422,
        )
    refuse_unless_running(run, "an answer cannot release anything; abort to close it.")
    if task.state != Task.State.ESCALATED:
        raise Refusal(
            f"The task {task.key} is {task.state}, not waiting for an answer.", status=409
        )


def refuse_unless_the_packet_read(escalation: Escalation, packet: int | None) -> None:
    """The answer is to the packet the reviewer read: one the agent replaced since is refused,
    nothing recorded, and the page shows the new one."""
    if packet is None or packet == escalation.packet_id:
        return
    if packet == 0:  # the form's field names no packet (the view's `shown_packet`)
        raise Refusal(
            "The form's packet field is not a packet's id, so which packet this answers is not "
            "known: reload the page and answer again. Nothing was recorded.",
            status=422,
        )
    raise Refusal(
        "The agent sent a new packet since this page was opened, and its question may differ: "
        "read it below and answer again. Nothing was recorded.",
        status=409,
    )


def escalation_answer(
    *,
    escalation: Escalation,
    reviewer: Any,
    text: str,
    option: str | None = None,
    packet: int | None = None,
) -> Answered:
    """Answer the packet's question: a verified claim, a reframed next attempt, the work released.

    One transaction, one call into the work; the frontier recompute and the notifications go out
    after its commit (`task.reframed` first). One answer per escalation: whoever comes second
    gets `AlreadyActed` naming who answered and when. On PostgreSQL it is six statements
    (`answering`), whatever the number of tasks the answer releases; a task that joins the
    escalation while its tasks are locked has the transaction taken again. `packet` is the
    packet the reviewer read (the page's): once the agent has replaced it, the answer is refused.
    """
    for _ in range(10):
        try:
            with transaction.atomic():
                return answering(escalation_id=escalation.pk, reviewer=reviewer, text=text,
                                 option=option, packet=packet)  # fmt: skip
        except JoinsChanged:
            continue
        except OperationalError as exc:
            if not rolled_back(exc):
                raise
            # PostgreSQL broke a deadlock with a concurrent change by rolling this one back:
            # nothing of it was written; again (it sees the change now).
            continue
        except IntegrityError:
            if not Answer.objects.filter(escalation_id=escalation.pk).exists():
                raise
            escalation.refresh_from_db()
            raise AlreadyActed(escalation) from None
    raise Refusal("Tasks keep joining this escalation: answer it again in a moment.", status=409)


def answering(
    *, escalation_id: int, reviewer: Any, text: str, option: str | None, packet: int | None
) -> Answered:
    """The answer's transaction: the locks (four statements), the run's facts and the tasks'
    decisions (one), every write (one: `fleet.together`)."""
    text, option = text.strip(), (option or "").strip()
    now = timezone.now()
    run, task, escalation, joined = locked_for_answer(escalation_id)
    refuse_unless_open(escalation, reviewer, now)
    refuse_unless_the_packet_read(escalation, packet)
    refuse_unless_answerable(run, task, escalation, text=text, option=option)
    answer_text = answer_text_of(text, option)
    user = reviewer.get_username()
    question = question_of(escalation) or escalation.reason
    items = [human_decisions.ToReframe(run=run, task=task, question=question)]
    answered_rows = []
    for row in joined:
        its_task, its_run = row.task, row.task.run
        if its_run.state != Run.State.RUNNING or its_task.state != Task.State.ESCALATED:
            joining.leave(  # its run is over (or it no longer waits): it leaves unanswered
                row,
                left=JoinedTask.Left.CLOSED,
                note=f"not answered: {its_task.key} is {its_task.state} and its run {its_run.state}",
                at=now,
            )
            continue
        asked = (row.packet.smallest_unblocking_question if row.packet else "") or question_of(
            escalation
        )
        items.append(human_decisions.ToReframe(run=its_run, task=its_task, question=asked))
        answered_rows.append(row)
    done = human_decisions.reframe_by_answer(
        tasks=items,
        hold=hold_of(escalation),
        escalation=escalation.pk,
        reviewer=user,
        answer=answer_text,
        at=now,
    )
    reframed = done.reframed[0]
    released = list(reframed.released)
    answered = [{"run": run.key, "task": task.key}]
    notices = []
    for item, its in zip(items[1:], done.reframed[1:], strict=True):
        answered.append({"run": item.run.key, "task": item.task.key})
        released += [k if item.run.pk == run.pk else f"{item.run.key}/{k}" for k in its.released]
        if item.run.pk != run.pk:
            notices.append(
                prepared(
                    item.run.fleet,
                    "escalation.answered",
                    {
                        "escalation": escalation.pk,
                        "run": item.run.key,
                        "task": item.task.key,
                        "question": item.question,
                        "answer": answer_text,
                        "by": f"reviewer:{user}",
                        "released": its.released,
                        "joined": True,
                    },
                )
            )
    released = list(dict.fromkeys(released))  # two tasks of one run may release the same one
    notices.insert(
        0,
        prepared(
            run.fleet,
            "escalation.answered",
            {
                "escalation": escalation.pk,
                "run": run.key,
                "task": task.key,
                "question": question,
                "answer": answer_text,
                "by": f"reviewer:{user}",
                "released": released,
                "tasks": answered,
            },
        ),
    )
    answer = Answer(
        escalation=escalation,
        reviewer=reviewer,
        text=answer_text,
        option=option,
        answered_at=now,
        released=released,
    )
    deliveries = done.deliveries + [n for n in notices if n is not None]
    together(  # an answer already there (never, under the lock) is an IntegrityError
        Insert([answer]),
        closing(escalation, reviewer, Escalation.Status.ANSWERED, now),
        Update(
            JoinedTask,
            {"pk__in": [row.pk for row in answered_rows]},
            {
                "left_at": now,
                "left": JoinedTask.Left.ANSWERED,
                "note": f"answered by {user} with {task.key}",
            },
        ),
        *done.writes,
        Insert(deliveries),
    )
    sent_after_commit(deliveries, done.runs)
    return Answered(answer=answer, released=released, blockers=reframed.blockers)


def sent_after_commit(deliveries: list[Delivery], runs: list[int]) -> None:
    """The answer's notifications, `task.reframed` first, then its runs' recomputes: one message
    after commit (`escalations.tasks.answered`); the recomputes alone while sending is held."""
    if held() or not deliveries:
        send_after_commit(deliveries)
        scheduler.recompute_runs_after_commit(runs)
        return
    after_commit(tasks.answered, [d.pk for d in deliveries], runs)


class JoinsChanged(Exception):
    """A task joined (or left) between reading the escalation's tasks and locking them."""


def locked_for_answer(escalation_id: int) -> tuple[Run, Task, Escalation, list[JoinedTask]]:
    """Every run, then every task waiting on the escalation (its own and the joined ones), then
    the escalation: the order the work and the desk lock in, so an answer and a join (or a
    split) wait for each other instead of deadlocking. Four statements: the runs and the tasks
    (found by subqueries on the escalation and its joined tasks), the escalation, then its
    joined tasks read again after its lock: a task that joined meanwhile and is not among those
    locked raises `JoinsChanged` (the caller takes the transaction again).

    Written in SQL (`LOCKS`): the ORM took three times as long to compile these statements as
    the database took to run them, on every answer."""
    sql = locks_sql()
    User = reviewer_model()
    with prepared_cursor() as cursor:
        cursor.execute(sql["runs"], {"escalation": escalation_id})
        runs = {}
        for row in cursor.fetchall():
            run = cast(Run, rows.instance(Run, row[: rows.width(Run)]))
            run.fleet = cast(Fleet, rows.instance(Fleet, row[rows.width(Run) :]))
            runs[run.pk] = run
        cursor.execute(sql["tasks"], {"escalation": escalation_id})
        tasks = {}
        for row in cursor.fetchall():
            task = cast(Task, rows.instance(Task, row[: rows.width(Task)]))
            task.agent = cast(Agent, rows.instance(Agent, row[rows.width(Task) :]))
            tasks[task.pk] = task
        cursor.execute(sql["escalation"], {"escalation": escalation_id})
        row = cursor.fetchone()
        if row is None:
            raise Escalation.DoesNotExist(f"No escalation {escalation_id}.")
        at = rows.width(Escalation)
        escalation = cast(Escalation, rows.instance(Escalation, row[:at]))
        escalation.claimed_by = rows.instance(User, row[at : at + rows.width(User)])
        escalation.packet = rows.instance(FailurePacket, row[at + rows.width(User) :])
        cursor.execute(sql["joined"], {"escalation": escalation_id})
        joined = []
        for row in cursor.fetchall():
            its = cast(JoinedTask, rows.instance(JoinedTask, row[: rows.width(JoinedTask)]))
            its.packet = rows.instance(FailurePacket, row[rows.width(JoinedTask) :])
            joined.append(its)
    for task_id in [escalation.task_id, *(row.task_id for row in joined)]:
        if task_id not in tasks or tasks[task_id].run_id not in runs:
            raise JoinsChanged
    for its in joined:
        its.task = tasks[its.task_id]
        its.task.run = runs[its.task.run_id]
    task = tasks[escalation.task_id]
    task.run = runs[task.run_id]
    escalation.task = task
    return runs[escalation.run_id], task, escalation, joined


def reviewer_model() -> Any:
    return Escalation._meta.get_field("claimed_by").related_model


# `locked_for_answer`'s statements; the names are the models' own (`locks_sql`). `{of_runs}` and
# `{of_tasks}` are the ids of the runs and the tasks waiting on the escalation (its own and its
# joined tasks'), each found through its own row (a joined task's run by a subquery per task).
LOCKS = {
    "runs": """
        SELECT {run_columns}, {fleet_columns}
        FROM {runs_locked} JOIN {fleet} f ON f.id = r.fleet_id {runs_where}
        ORDER BY r.id""",
    "tasks": """
        SELECT {task_columns}, {agent_columns}
        FROM {tasks_locked} JOIN {agent} a ON a.id = t.agent_id {tasks_where}
        ORDER BY t.id""",
    "escalation": """
        SELECT {escalation_columns}, {user_columns}, {packet_columns}
        FROM {escalation} e LEFT JOIN {user} u ON u.id = e.claimed_by_id
            LEFT JOIN {packet} p ON p.id = e.packet_id
        WHERE e.id = %(escalation)s {lock_e}""",
    "joined": """
        SELECT {joined_columns}, {packet_columns_j}
        FROM {joined} j LEFT JOIN {packet} p ON p.id = j.packet_id
        WHERE j.escalation_id = %(escalation)s AND j.left_at IS NULL
        ORDER BY j.joined_at, j.id""",
}
IDS = {
    "of_runs": """
            SELECT run_id FROM {escalation} WHERE id = %(escalation)s
            UNION
            SELECT (SELECT run_id FROM {task} WHERE id = j.task_id) FROM {joined} j
              WHERE j.escalation_id = %(escalation)s AND j.left_at IS NULL""",
    "of_tasks": """
            SELECT task_id FROM {escalation} WHERE id = %(escalation)s
            UNION
            SELECT task_id FROM {joined} WHERE escalation_id = %(escalation)s AND left_at IS NULL""",
}
# On PostgreSQL each run and each task is locked through a probe of its primary key, in the
# order of the ids (a LATERAL subquery for each, which the planner cannot turn into a scan): with
# `IN (...)`, a planner whose statistics predate the tables' growth read every run and every
# task of the database to find them. SQLite takes no row locks.
# A run is locked FOR NO KEY UPDATE, as PostgreSQL locks a row it updates: an event that locked
# its task first and then writes a row naming the run (a packet's escalation, a frontier change)
# takes the run's KEY SHARE lock, which FOR UPDATE would have made wait for the answer while the
# answer waited for the task: a deadlock.
LOCKED = {
    "postgresql": {
        "runs_locked": """(SELECT id FROM ({of_runs}) AS u(id) ORDER BY id) AS ids
            CROSS JOIN LATERAL (SELECT * FROM {run} WHERE id = ids.id FOR NO KEY UPDATE) AS r""",
        "runs_where": "",
        "tasks_locked": """(SELECT id FROM ({of_tasks}) AS u(id) ORDER BY id) AS ids
            CROSS JOIN LATERAL (SELECT * FROM {task} WHERE id = ids.id FOR UPDATE) AS t""",
        "tasks_where": "",
    },
    "sqlite": {
        "runs_locked": "{run} r",
        "runs_where": "WHERE r.id IN ({of_runs})",
        "tasks_locked": "{task} t",
        "tasks_where": "WHERE t.id IN ({of_tasks})",
    },
}


@cache
def locks_sql() -> dict[str, str]:
    """`LOCKS` with the models' tables and columns, the ids found as the database allows."""
    User = reviewer_model()
    names = {
        name: connection.ops.quote_name(model._meta.db_table)
        for name, model in (
            ("run", Run), ("fleet", Fleet), ("task", Task), ("agent", Agent),
            ("escalation", Escalation), ("user", User), ("packet", FailurePacket),
            ("joined", JoinedTask),
        )
    }  # fmt: skip
    ids = {name: sql.format(**names) for name, sql in IDS.items()}
    locked = LOCKED["postgresql" if connection.vendor == "postgresql" else "sqlite"]
    names.update({name: sql.format(**names, **ids) for name, sql in locked.items()})
    names.update(
        run_columns=rows.columns(Run, "r"),
        fleet_columns=rows.columns(Fleet, "f"),
        task_columns=rows.columns(Task, "t"),
        agent_columns=rows.columns(Agent, "a"),
        escalation_columns=rows.columns(Escalation, "e"),
        user_columns=rows.columns(User, "u"),
        packet_columns=rows.columns(FailurePacket, "p"),
        joined_columns=rows.columns(JoinedTask, "j"),
        packet_columns_j=rows.columns(FailurePacket, "p"),
        lock_e="FOR UPDATE OF e" if connection.features.has_select_for_update_of else "",
    )
    return {name: sql.format(**names) for name, sql in LOCKS.items()}
