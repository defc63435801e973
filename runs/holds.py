"""Holds: a person has the task. The desk places and lifts them; the frontier reads them."""

from collections.abc import Iterable
from datetime import datetime

from runs.models import Blocker, Hold, Run, Task


def place(*, task: Task, code: str, at: datetime, new: bool = False) -> None:
    """Hold the task under `code` (`escalation:<id>`); placing it again renews a lifted hold.
    `new`: the code was never placed (a new escalation's), so it is only inserted."""
    if new:
        Hold.objects.create(task=task, code=code, placed_at=at)
        return
    Hold.objects.update_or_create(
        task=task, code=code, defaults={"placed_at": at, "lifted_at": None}
    )


def lift(
    *,
    run: Run | int,
    codes: Iterable[str],
    at: datetime,
    clear: bool = True,
    task: Task | None = None,
) -> None:
    """Lift the holds and, unless `clear` is False, clear at once the blockers they set (the
    checkpoint says when); otherwise the frontier's next recompute clears them. With `task`,
    only that task's: several tasks of a run can wait on one escalation (the same question)."""
    codes = list(codes)
    holds = Hold.objects.filter(task__run=run, code__in=codes, lifted_at__isnull=True)
    blockers = Blocker.objects.filter(task__run=run, code__in=codes, cleared_at__isnull=True)
    if task is not None:
        holds, blockers = holds.filter(task=task), blockers.filter(task=task)
    holds.update(lifted_at=at)
    if clear:
        blockers.update(cleared_at=at)


def held(run: Run) -> dict[str, list[str]]:
    """Each task's holds in place, oldest first: task key -> codes."""
    found: dict[str, list[str]] = {}
    for key, code in (
        Hold.objects.filter(task__run=run, lifted_at__isnull=True)
        .order_by("placed_at", "pk")
        .values_list("task__key", "code")
    ):
        found.setdefault(key, []).append(code)
    return found


def first_hold(task: Task) -> str | None:
    return (
        Hold.objects.filter(task=task, lifted_at__isnull=True)
        .order_by("placed_at", "pk")
        .values_list("code", flat=True)
        .first()
    )
