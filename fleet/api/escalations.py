"""API routes of the desk: one escalation, and a run's escalations."""

from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from ninja import Router
from ninja.errors import HttpError

from escalations.models import Escalation
from escalations.routing import overdue
from escalations.selectors.runs import escalation_rows, missing_and_note
from escalations.selectors.waiting import outcome_of, tasks_waiting
from fleet.api.access import fleet_ids
from fleet.api.runs import FLEET, RUN_ERRORS, get_run
from fleet.api.schemas import ERRORS, Errors, EscalationOut, EscalationRow

router = Router(tags=["escalations"])


@router.get(
    "/escalations/{escalation_id}",
    response={200: EscalationOut, **ERRORS, 422: Errors},  # 422: an id that is not a number
    summary="An escalation with its packet and answer",
)
def escalation_detail(request: HttpRequest, escalation_id: int) -> dict[str, Any]:
    escalation = (
        Escalation.objects.filter(pk=escalation_id, fleet_id__in=fleet_ids(request))
        .select_related("run", "task", "packet", "claimed_by", "assignee")
        .first()
    )
    if escalation is None:
        raise HttpError(404, f"no escalation {escalation_id}")
    answer = getattr(escalation, "answer", None)
    packet = escalation.packet
    missing, note = missing_and_note(escalation)
    return {
        "id": escalation.pk,
        "run": escalation.run.key,
        "task": escalation.task.key,
        "status": escalation.status,
        "outcome": outcome_of(escalation),
        "tasks": [
            {k: row[k] for k in ("run", "task", "agent", "question", "joined", "joined_at")}
            for row in tasks_waiting(escalation)
        ],
        "reason": escalation.reason,
        "opened_at": escalation.opened_at,
        "question": (packet.smallest_unblocking_question or None) if packet else None,
        "packet": packet.content if packet else None,
        "drafted": bool(packet and packet.drafted),
        "from_draft": list(packet.from_draft) if packet else [],
        "checks_pending": bool(packet and packet.checks_pending),
        "checks": [
            {"status": c.get("status"), "reason": c.get("reason"), "payload": c.get("payload")}
            for c in (packet.checks if packet and not packet.checks_pending else [])
        ],
        "claimed_by": escalation.claimed_by.get_username() if escalation.claimed_by else None,
        "assigned_to": escalation.assignee.get_username() if escalation.assignee else None,
        "tier": escalation.tier,
        "due_at": escalation.due_at,
        "overdue": escalation.status in Escalation.OPEN_STATES
        and overdue(escalation.due_at, timezone.now()),
        "answer": {
            "text": answer.text,
            "by": answer.reviewer.get_username(),
            "at": answer.answered_at,
        }
        if answer
        else None,
        "missing": missing,
        "note": note,
    }


@router.get(
    "/runs/{run}/escalations",
    response={200: list[EscalationRow], **RUN_ERRORS},
    summary="The run's escalations, newest first: what each waits on, and its answer",
)
def run_escalations(
    request: HttpRequest, run: str, fleet: str | None = FLEET
) -> list[dict[str, Any]]:
    return escalation_rows(get_run(request, run, fleet))
