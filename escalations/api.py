"""API routes of the desk: one escalation."""

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.errors import HttpError

from escalations.models import Escalation
from fleet.api import ERRORS, Errors, fleet_ids
from runs.api_schemas import one_of

router = Router(tags=["escalations"])

# Schemas: what the route returns, field for field (a field missing here would vanish).


class AnswerOut(Schema):
    """The reviewer's answer to the packet's question."""

    text: str
    by: str = Field(description="The reviewer's username.")
    at: datetime


class EscalationOut(Schema):
    """An escalation with its failure packet and, once answered, the answer."""

    id: int
    run: str
    task: str
    status: str = one_of(Escalation.Status)
    reason: str = Field(description="Why the work was escalated.")
    opened_at: datetime
    question: str | None = Field(description="The packet's smallest unblocking question.")
    packet: dict[str, Any] | None = Field(description="The failure packet as the agent sent it.")
    claimed_by: str | None = Field(description="The username of the reviewer who claimed it.")
    answer: AnswerOut | None


@router.get(
    "/escalations/{escalation_id}",
    response={200: EscalationOut, **ERRORS, 422: Errors},  # 422: an id that is not a number
    summary="An escalation with its packet and answer",
)
def escalation_detail(request: HttpRequest, escalation_id: int) -> dict[str, Any]:
    escalation = (
        Escalation.objects.filter(pk=escalation_id, fleet_id__in=fleet_ids(request))
        .select_related("run", "task", "packet", "claimed_by")
        .first()
    )
    if escalation is None:
        raise HttpError(404, f"no escalation {escalation_id}")
    answer = getattr(escalation, "answer", None)
    return {
        "id": escalation.pk,
        "run": escalation.run.key,
        "task": escalation.task.key,
        "status": escalation.status,
        "reason": escalation.reason,
        "opened_at": escalation.opened_at,
        "question": escalation.packet.smallest_unblocking_question if escalation.packet else None,
        "packet": escalation.packet.content if escalation.packet else None,
        "claimed_by": escalation.claimed_by.get_username() if escalation.claimed_by else None,
        "answer": {
            "text": answer.text,
            "by": answer.reviewer.get_username(),
            "at": answer.answered_at,
        }
        if answer
        else None,
    }
