"""What the client raises: one base type, the server's `errors` on every refusal."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bulkhead_client.client import PreparedEvent

__all__ = ["Blocked", "BulkheadError", "Refused", "RetriesExhausted", "Unauthorized"]


class BulkheadError(Exception):
    """Anything the client could not get done."""


class Refused(BulkheadError):
    """Bulkhead answered with an error it will answer again (4xx, or a 500): `errors` is its
    `[{"loc", "msg"}, ...]`, naming what is wrong; `status` is the HTTP status.

    A 4xx event was not applied: fix it and send it again (the same webhook-id is fine). A 500
    is not retried; nothing of the event was written.
    """

    def __init__(self, status: int, errors: list[dict[str, str]], *, body: Any = None) -> None:
        self.status = status
        self.errors = errors
        self.body = body
        lines = "; ".join(f"{e.get('loc', '')}: {e.get('msg', '')}" for e in errors)
        super().__init__(f"{status}: {lines or body!r}")

    def messages(self, loc: str) -> list[str]:
        """The messages of the errors at `loc` (e.g. "data.claim.evidence")."""
        return [e.get("msg", "") for e in self.errors if e.get("loc") == loc]


class Unauthorized(Refused):
    """401: a wrong secret or token, a webhook-timestamp off by more than 5 minutes, an unknown
    agent (Bulkhead answers them alike). `clock_skew`: seconds this machine's clock is ahead of
    the server's, read from its Date header (None without one); more than 4 minutes adds a note
    saying so."""

    clock_skew: float | None = None


class Blocked(Refused):
    """409 from `task.started`: the task is not in the run's safe ready frontier.

    `blockers` are the typed blockers (`claim:plan.tier-source`, `capability:forge`,
    `prerequisite:plan`, `escalation:12`, `run:failed`, ...); `reasons` say why, beside them
    (`{"loc": "claims.plan.tier-source", "msg": "... is refuted: ..."}`).
    """

    def __init__(self, status: int, errors: list[dict[str, str]], *, body: Any = None) -> None:
        super().__init__(status, errors, body=body)
        self.blockers = [e.get("msg", "") for e in errors if e.get("loc") == "blockers"]
        self.reasons = [e for e in errors if e.get("loc") != "blockers"]


class RetriesExhausted(BulkheadError):
    """Bulkhead stayed unavailable (429, 5xx but 500, no connection or no answer in time) for
    every try within the bound.

    The event may or may not have been applied. `event` is the signed event as it was sent
    (None for a read): `bh.deliver(error.event)` sends it again later under the same
    webhook-id and body bytes, and Bulkhead applies it at most once. (Sending the same data
    again with `send` makes a new body: a new timestamp, so a 409 under the old webhook-id.)
    """

    def __init__(
        self,
        message: str,
        *,
        attempts: int,
        last_status: int | None,
        event: "PreparedEvent | None" = None,
    ) -> None:
        self.attempts = attempts
        self.last_status = last_status
        self.event = event
        super().__init__(message)
