"""A buffer of events that gate nothing, sent together: `POST /hooks/v1/agents/<id>/batches`.

The batch is signed like one event (its own webhook-id, fixed across retries); each event in it
is idempotent on its own `id`, so a batch sent again applies nothing twice.
"""

import json
import uuid
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

from bulkhead_client.client import PreparedEvent
from bulkhead_client.errors import Refused
from bulkhead_client.events import Data
from bulkhead_client.responses import BatchResult

if TYPE_CHECKING:
    from collections.abc import Mapping

    from bulkhead_client.client import Bulkhead

__all__ = ["NON_GATING", "Batch", "BatchRefused"]

# What may wait in a buffer: nothing the sender acts on depends on the answer right away.
# task.started (its 409 says whether the task may start), run.started and packet.submitted are
# sent on their own.
NON_GATING = frozenset({"claim.posted", "claim.checked", "task.finished", "capability.changed"})
MAX_EVENTS = 500


class BatchRefused(Refused):
    """Events of a batch that were refused: `results` are every event's result, in order."""

    def __init__(self, results: list[BatchResult]) -> None:
        self.results = results
        errors = [
            {"loc": f"events.{r.id}.{e.get('loc', '')}", "msg": str(e.get("msg", ""))}
            for r in results
            if r.status >= 400
            for e in (r.body.get("errors") or [{"loc": "", "msg": json.dumps(r.body)}])
        ]
        super().__init__(
            max(r.status for r in results), errors, body=[r.model_dump() for r in results]
        )


class Batch:
    """`with bh.batch() as batch: batch.add("claim.posted", ...)`: sent on exit (and whenever
    `max_events` are waiting); `flush()` sends what waits and returns each event's result."""

    def __init__(self, client: "Bulkhead", *, max_events: int = MAX_EVENTS) -> None:
        if not 1 <= max_events <= MAX_EVENTS:
            raise ValueError(f"a batch holds 1 to {MAX_EVENTS} events, not {max_events}")
        self.client = client
        self.max_events = max_events
        self.waiting: list[dict[str, Any]] = []
        self.results: list[BatchResult] = []

    def add(self, type: str, data: "Data | Mapping[str, Any]", *, id: str | None = None) -> str:
        """Buffer one event; returns its id (its idempotency key within the batch)."""
        if type not in NON_GATING:
            raise ValueError(
                f"{type} is not buffered: send it on its own (bh.send), since what comes next "
                f"depends on its answer; a batch takes {', '.join(sorted(NON_GATING))}"
            )
        event_id = id or f"msg_{uuid.uuid4().hex}"
        self.waiting.append(
            {
                "id": event_id,
                "type": type,
                "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                "data": self.client.event_data(type, data),
            }
        )
        if len(self.waiting) >= self.max_events:
            self.flush()
        return event_id

    def prepared(self) -> PreparedEvent:
        body = json.dumps({"events": self.waiting}, separators=(",", ":"), ensure_ascii=False)
        return PreparedEvent(
            webhook_id=f"batch_{uuid.uuid4().hex}",
            type="batch",
            body=body.encode(),
            signed_at=int(self.client.clock()),
        )

    def flush(self, *, raise_refused: bool = True) -> list[BatchResult]:
        """Send what waits in one signed batch (retried like an event); each event's result.
        Raises `BatchRefused` if any event was refused (after every other one was applied)."""
        if not self.waiting:
            return []
        event = self.prepared()
        response = self.client.post_signed(self.client.batch_endpoint, event)
        self.waiting = []
        results = [BatchResult.model_validate(r) for r in response.json()["results"]]
        self.results += results
        if raise_refused and any(r.status >= 400 for r in results):
            raise BatchRefused(results)
        return results

    def __enter__(self) -> "Batch":
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is None:
            self.flush()
