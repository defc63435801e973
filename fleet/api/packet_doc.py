"""The failure packet as the OpenAPI document describes it (`Packet`).

The intake takes `data.packet` as a JSON object and `escalations.packets` validates it, naming each
bad field; this model only documents those rules, so that a client generated from the document
has the packet's fields typed. Every field is optional here because a packet that completes one
Bulkhead drafted (`packet.requested`) sends only what the draft is missing; without a draft,
`task`, `tried`, `ruled_out`, `evidence` and `smallest_unblocking_question` are required.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from escalations.packet_fields import ENTRY_MAX_CHARS, LIST_MAX_ITEMS
from escalations.packets import DEDUP_KEY_MAX_CHARS, QUESTION_MAX_CHARS
from fleet.events import EvidenceIn

Entries = list[str] | None


class RuledOut(BaseModel):
    model_config = ConfigDict(extra="forbid", title="RuledOut")

    hypothesis: str = Field(min_length=1, max_length=ENTRY_MAX_CHARS)
    how: str = Field(min_length=1, max_length=ENTRY_MAX_CHARS, description="How it was ruled out.")


class Packet(BaseModel):
    """A failure packet: what the agent tried, ruled out and found, and the one smallest question
    that would unblock it. Anything else (a transcript, an unknown field, an empty field) is
    refused with 422 naming the field."""

    model_config = ConfigDict(extra="forbid", title="Packet")

    task: str | None = Field(
        None,
        min_length=1,
        description="The task it is about: its key, or its description in words.",
    )
    tried: Entries = Field(
        None, min_length=1, max_length=LIST_MAX_ITEMS, description="What was tried; not empty."
    )
    ruled_out: list[RuledOut] | None = Field(
        None, max_length=LIST_MAX_ITEMS, description="Hypotheses ruled out, and how; may be empty."
    )
    evidence: list[EvidenceIn] | None = Field(
        None,
        min_length=1,
        max_length=LIST_MAX_ITEMS,
        description="Evidence objects, not sentences; not `agent:` sources or `human_answer`.",
    )
    smallest_unblocking_question: str | None = Field(
        None,
        min_length=1,
        max_length=QUESTION_MAX_CHARS,
        description="Exactly one question (one sentence ending in '?').",
    )
    options: Entries = Field(
        None, min_length=1, max_length=LIST_MAX_ITEMS, description="Answers a reviewer may pick."
    )
    urgency: Literal["low", "normal", "high"] | None = Field(
        None, description="Sets the escalation's due time by the fleet's rules."
    )
    dedup_key: str | None = Field(
        None,
        min_length=1,
        max_length=DEDUP_KEY_MAX_CHARS,
        pattern=r"^\S+$",
        description="Your name for the question: packets of the fleet with the same key ask the "
        "same question (they wait on one escalation).",
    )
