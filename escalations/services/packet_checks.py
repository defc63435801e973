"""A packet has a price: its evidence is re-checked against reality, like a claim's.

Stored packets (the agent's, or Bulkhead's draft) are marked `checks_pending` in the transaction
that stores them and re-checked by a worker after commit (`escalations.tasks.check_packet`) with
the claims' verifiers (`runs.claims.evidence_check`); each evidence entry gets a check
`{status, reason, payload}`: verified (reality matches its hash), refuted (it differs), or
unverified with why (nothing could reach it). `payload` is what reality gave, so the reviewer
reads the rows, lines or exit code, not only a hash. The reconciler re-enqueues a check whose
message was lost; a second run finds nothing pending.
"""

from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from escalations import tasks
from escalations.models import FailurePacket
from escalations.packets import packet_size
from runs.claims.evidence_check import check_evidence
from runs.claims.verifiers import Verdict

BATCH = 500
ROWS_KEPT = 50  # of a query result's rows, as the packet page shows them
TEXT_KEPT = 20_000  # characters of a file's lines
PAYLOAD_KEPT_BYTES = 32 * 1024


def check_after_commit(packet: FailurePacket) -> None:
    """Ask a worker to re-check the packet's evidence once the packet is committed."""
    if not packet.checks_pending:
        return
    packet_id = packet.pk
    transaction.on_commit(lambda: tasks.check_packet.delay(packet_id))


def evidence_of(packet: FailurePacket) -> list[dict[str, Any]]:
    content = packet.content if isinstance(packet.content, dict) else {}
    items = content.get("evidence")
    return (
        [dict(e) if isinstance(e, dict) else {} for e in items] if isinstance(items, list) else []
    )


def packet_check(packet_id: int) -> None:
    """Re-check the packet's evidence and record one check per entry (idempotent).

    One re-check of a packet at a time (a test command could see another copy's work); the lease
    expires with the task's time limit, so a worker that died leaves it to the reconciler.
    """
    lease = f"check-packet:{packet_id}"
    if not cache.add(lease, "held", timeout=settings.CELERY_TASK_TIME_LIMIT):
        return
    try:
        packet = (
            FailurePacket.objects.filter(pk=packet_id, checks_pending=True)
            .select_related("task__run")
            .first()
        )
        if packet is None:
            return  # gone, or already checked
        verdicts = check_evidence(fleet_id=packet.task.run.fleet_id, evidence=evidence_of(packet))
        record(packet_id, verdicts, timezone.now())
    finally:
        cache.delete(lease)


@transaction.atomic
def record(packet_id: int, verdicts: list[Verdict], now: datetime) -> None:
    packet = FailurePacket.objects.select_for_update().filter(pk=packet_id).first()
    if packet is None or not packet.checks_pending:
        return
    packet.checks = [check_of(verdict, now) for verdict in verdicts]
    packet.checks_pending = False
    packet.save(update_fields=["checks", "checks_pending"])


def check_of(verdict: Verdict, now: datetime) -> dict[str, Any]:
    return {
        "status": verdict.status,
        "reason": verdict.reason,
        "payload": kept(verdict.payload),
        "checked_at": now.isoformat(),
    }


def kept(payload: dict[str, Any] | None) -> dict[str, Any] | None:
    """What reality gave, as much as a reviewer reads: long results are cut, saying so."""
    if payload is None or packet_size(payload) <= PAYLOAD_KEPT_BYTES:
        return payload
    cut = dict(payload)
    rows = cut.get("rows")
    if isinstance(rows, list) and len(rows) > ROWS_KEPT:
        cut["rows"] = rows[:ROWS_KEPT]
        cut["rows_total"] = len(rows)
    text = cut.get("text")
    if isinstance(text, str) and len(text) > TEXT_KEPT:
        cut["text"] = text[:TEXT_KEPT]
        cut["text_total"] = len(text)
    if packet_size(cut) > PAYLOAD_KEPT_BYTES:
        return {"too_large": packet_size(payload)}
    return cut


def reenqueue(*, now: datetime, **_: Any) -> dict[str, int]:
    """Packets still waiting for their re-check: the message may have been lost. (A copy that
    was only slow finds the lease held, or nothing pending.) Called by the fleet's reconciler."""
    pending = list(
        FailurePacket.objects.filter(checks_pending=True).values_list("pk", flat=True)[:BATCH]
    )
    for packet_id in pending:
        tasks.check_packet.delay(packet_id)
    return {"packet_checks": len(pending)}
