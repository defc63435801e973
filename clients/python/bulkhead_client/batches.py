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
MAX_BYTES = 16 * 1024 * 1024  # the server's WEBHOOK_MAX_BATCH_BYTES unless it was changed
FRAME = len(b'{"events":[]}')


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
    """`with bh.batch() as batch: batch.add("claim.posted", ...)`: sent on exit, even when the
    block raises (what it recorded happened), and whenever `max_events` (or `max_bytes` of
    JSON) are waiting; `flush()` sends what waits and returns each event's result."""

    def __init__(
        self, client: "Bulkhead", *, max_events: int = MAX_EVENTS, max_bytes: int = MAX_BYTES
    ) -> None:
        if not 1 <= max_events <= MAX_EVENTS:
            raise ValueError(f"a batch holds 1 to {MAX_EVENTS} events, not {max_events}")
        if max_bytes <= FRAME:
            raise ValueError(f"a batch's body needs more than {FRAME} bytes, not {max_bytes}")
        self.client = client
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.waiting: list[dict[str, Any]] = []
        self.sizes: list[int] = []  # each waiting event's JSON in the body, with its comma
        self.results: list[BatchResult] = []

    def add(self, type: str, data: "Data | Mapping[str, Any]", *, id: str | None = None) -> str:
        """Buffer one event; returns its id (its idempotency key within the batch)."""
        if type not in NON_GATING:
            raise ValueError(
                f"{type} is not buffered: send it on its own (bh.send), since what comes next "
                f"depends on its answer; a batch takes {', '.join(sorted(NON_GATING))}"
            )
        event_id = id or f"msg_{uuid.uuid4().hex}"
        event = {
            "id": event_id,
            "type": type,
            "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "data": self.client.event_data(type, data),
        }
        size = len(encoded(event)) + 1
        if size + FRAME > self.max_bytes:
            raise ValueError(
                f"the event is {size - 1:,} bytes of JSON, more than a batch of {self.max_bytes:,} "
                "bytes holds: send it on its own (bh.send)"
            )
        self.waiting.append(event)
        self.sizes.append(size)
        if len(self.waiting) >= self.max_events or FRAME + sum(self.sizes) >= self.max_bytes:
            self.flush()
        return event_id

    def prepared(self, events: list[dict[str, Any]]) -> PreparedEvent:
        return PreparedEvent(
            webhook_id=f"batch_{uuid.uuid4().hex}",
            type="batch",
            body=encoded({"events": events}),
            signed_at=int(self.client.clock()),
        )

    def next_request(self) -> int:
        """How many of the waiting events go in the next request: at most `max_events`, and
        as many as `max_bytes` hold (one at least)."""
        count, size = 0, FRAME
        for each in self.sizes[: self.max_events]:
            if count and size + each > self.max_bytes:
                break
            count, size = count + 1, size + each
        return count

    def flush(self, *, raise_refused: bool = True) -> list[BatchResult]:
        """Send what waits, in signed requests of at most `max_events` and `max_bytes` (each
        retried like an event), and return each event's result. Raises `BatchRefused` if any
        event was refused (after every other one was applied). A request that gets no answer
        (`RetriesExhausted`) leaves its events and those after it waiting: the next `flush`
        sends them again under their same ids."""
        results: list[BatchResult] = []
        while self.waiting:
            count = self.next_request()
            event = self.prepared(self.waiting[:count])
            response = self.client.post_signed(self.client.batch_endpoint, event)
            del self.waiting[:count], self.sizes[:count]
            sent = [BatchResult.model_validate(r) for r in response.json()["results"]]
            self.results += sent
            results += sent
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
        if kind is None or issubclass(kind, Exception):  # not on Ctrl-C or exit
            self.flush()


def encoded(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
