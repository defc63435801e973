"""A small typed client for Bulkhead: signed events, idempotent retries, evidence hashed the
canonical way, the read API, an orchestration surface and a callback receiver."""

from bulkhead_client import canonical, evidence
from bulkhead_client.batches import Batch, BatchRefused
from bulkhead_client.client import Bulkhead, PreparedEvent, RetryPolicy
from bulkhead_client.errors import Blocked, BulkheadError, Refused, RetriesExhausted, Unauthorized
from bulkhead_client.events import (
    Artifact,
    Claim,
    Evidence,
    Failure,
    Notification,
    Packet,
    RuledOut,
    Task,
)
from bulkhead_client.orchestration import (
    NoAnswer,
    PacketReturned,
    RunHandle,
    TaskAttempt,
    TaskFailed,
    text_hash,
)
from bulkhead_client.receiver import CallbackReceiver

__all__ = [
    "Artifact",
    "Batch",
    "BatchRefused",
    "Blocked",
    "Bulkhead",
    "BulkheadError",
    "CallbackReceiver",
    "Claim",
    "Evidence",
    "Failure",
    "NoAnswer",
    "Notification",
    "Packet",
    "PacketReturned",
    "PreparedEvent",
    "Refused",
    "RetriesExhausted",
    "RetryPolicy",
    "RuledOut",
    "RunHandle",
    "Task",
    "TaskAttempt",
    "TaskFailed",
    "Unauthorized",
    "canonical",
    "evidence",
    "text_hash",
]
__version__ = "0.1.0"
