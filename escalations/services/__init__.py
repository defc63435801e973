"""Writes of the human desk, one module per feature: packets in (`packet`), an escalation's
state (`state`), the answer (`answer`), the other decisions (`decisions`), the reviewer on the
work (`claims`). The names below are the desk's public services."""

from escalations.services.answer import Answered, escalation_answer
from escalations.services.claims import (
    claim_check_by_hand,
    claim_raise,
    claim_recheck,
    task_release_stop,
)
from escalations.services.decisions import (
    abort_reach,
    escalation_abort,
    escalation_reroute,
    escalation_return,
)
from escalations.services.joining import escalation_split
from escalations.services.packet import packet_submit
from escalations.services.state import (
    NOTE_MAX_CHARS,
    PACKET_FIELDS,
    AlreadyActed,
    claim_active,
    escalation_claim,
    escalation_looked_at,
    escalation_release,
    outcome_of,
)

__all__ = [
    "NOTE_MAX_CHARS",
    "PACKET_FIELDS",
    "AlreadyActed",
    "claim_active",
    "Answered",
    "abort_reach",
    "claim_check_by_hand",
    "claim_raise",
    "claim_recheck",
    "escalation_abort",
    "escalation_answer",
    "escalation_claim",
    "escalation_looked_at",
    "escalation_release",
    "escalation_reroute",
    "escalation_split",
    "escalation_return",
    "outcome_of",
    "packet_submit",
    "task_release_stop",
]
