"""The agent's connection to Bulkhead: signed events with idempotent retries, and the read API."""

import json
import random
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, urlsplit

import httpx
from pydantic import BaseModel
from standardwebhooks.webhooks import Webhook

from bulkhead_client.errors import Blocked, Refused, RetriesExhausted, Unauthorized
from bulkhead_client.events import EVENT_MODELS, Data, RunStarted, Task
from bulkhead_client.responses import (
    Accepted,
    ContextOut,
    EscalationOut,
    EscalationRow,
    FrontierOut,
    RunOut,
)

__all__ = ["Bulkhead", "PreparedEvent", "RetryPolicy"]

RETRYABLE = frozenset({429, 502, 503, 504})
RESEND = "send it again later with deliver(error.event): the same webhook-id and body"
# Standard Webhooks refuses a webhook-timestamp more than 5 minutes off: a retry later than this
# is signed again with a fresh timestamp (same webhook-id, same body bytes).
RESIGN_AFTER_S = 240.0
M = TypeVar("M", bound=BaseModel)
ENDPOINT_PATH = re.compile(r"(?P<prefix>.*)/hooks/v1/agents/(?P<agent>[^/]+)/(?:events|batches)")


@dataclass(frozen=True)
class RetryPolicy:
    """Retries on 429, 502, 503, 504 and connection errors: `Retry-After` when the server says
    it, else exponential backoff with jitter; at most `attempts` tries within `deadline` s."""

    attempts: int = 6
    base_delay: float = 0.5
    max_delay: float = 30.0
    deadline: float = 120.0

    def backoff(self, tries: int, rng: random.Random) -> float:
        delay = min(self.max_delay, self.base_delay * 2.0 ** max(0, tries - 1))
        return delay * (0.5 + rng.random() / 2)


@dataclass(frozen=True)
class PreparedEvent:
    """One event, ready to send: its webhook-id, body bytes and signing time are fixed here, so
    every retry (and a later re-send of a refused event) is the same event to Bulkhead."""

    webhook_id: str
    type: str
    body: bytes
    signed_at: int

    @property
    def envelope(self) -> dict[str, Any]:
        return dict(json.loads(self.body))


SKEW_HINT_S = 240  # the server allows 5 minutes; a clock this far off is worth saying


def clock_skew(date: str | None, now: float) -> float | None:
    """Seconds this machine's clock is ahead of the server's, by its Date header (None without
    one: the header has whole seconds, enough to tell minutes)."""
    if not date:
        return None
    try:
        return now - parsedate_to_datetime(date).timestamp()
    except (TypeError, ValueError):
        return None


def retry_after(value: str | None, now: float) -> float | None:
    """Seconds the server asked to wait (delta-seconds or an HTTP date), if it said."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now) if when.tzinfo else None


def errors_of(response: httpx.Response) -> tuple[list[dict[str, str]], Any]:
    try:
        body = response.json()
    except ValueError:
        return [{"loc": "body", "msg": response.text[:500]}], response.text
    errors = body.get("errors") if isinstance(body, dict) else None
    return (errors if isinstance(errors, list) else []), body


class Bulkhead:
    """One agent's client. Give it the `endpoint`, `signing_secret` and `api_token` that
    `agent_create` printed:

    >>> bh = Bulkhead(endpoint="http://127.0.0.1:8000/hooks/v1/agents/<id>/events",
    ...               secret="whsec_...", token="bhk_...")
    """

    def __init__(
        self,
        *,
        endpoint: str,
        secret: str,
        token: str | None = None,
        retry: RetryPolicy | None = None,
        http: httpx.Client | None = None,
        timeout: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        parts = urlsplit(endpoint)
        found = ENDPOINT_PATH.fullmatch(parts.path.rstrip("/"))
        if not parts.scheme or not parts.netloc or found is None:
            raise ValueError(
                f"{endpoint!r} is not an agent's endpoint: it ends /hooks/v1/agents/<id>/events"
            )
        self.agent_id = found["agent"]
        self.base_url = f"{parts.scheme}://{parts.netloc}{found['prefix']}"
        self.endpoint = f"{self.base_url}/hooks/v1/agents/{self.agent_id}/events"
        self.batch_endpoint = f"{self.base_url}/hooks/v1/agents/{self.agent_id}/batches"
        self.webhook = Webhook(secret)
        self.token = token
        self.retry = retry or RetryPolicy()
        self.http = http or httpx.Client(timeout=timeout, follow_redirects=False)
        self.sleep = sleep
        self.clock = clock
        self.rng = rng or random.Random()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> "Bulkhead":
        """From BULKHEAD_ENDPOINT, BULKHEAD_SECRET and BULKHEAD_TOKEN."""
        import os

        env = os.environ if environ is None else environ
        return cls(
            endpoint=env["BULKHEAD_ENDPOINT"],
            secret=env["BULKHEAD_SECRET"],
            token=env.get("BULKHEAD_TOKEN"),
            **kwargs,
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "Bulkhead":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Signing ---------------------------------------------------------------------------------

    def prepare(
        self,
        type: str,
        data: Data | Mapping[str, Any],
        *,
        webhook_id: str | None = None,
        timestamp: datetime | None = None,
    ) -> PreparedEvent:
        """The event's envelope as body bytes, with a webhook-id (new unless given)."""
        payload = self.event_data(type, data)
        stamp = (timestamp or datetime.now(UTC)).isoformat().replace("+00:00", "Z")
        envelope = {"type": type, "timestamp": stamp, "data": payload}
        body = json.dumps(envelope, separators=(",", ":"), ensure_ascii=False).encode()
        return PreparedEvent(
            webhook_id=webhook_id or f"msg_{uuid.uuid4().hex}",
            type=type,
            body=body,
            signed_at=int(self.clock()),
        )

    @staticmethod
    def event_data(type: str, data: Data | Mapping[str, Any]) -> dict[str, Any]:
        model = EVENT_MODELS.get(type)
        if model is None:
            raise ValueError(f"{type!r} is not an event type; one of {', '.join(EVENT_MODELS)}")
        if isinstance(data, Data):
            if not isinstance(data, model):
                raise TypeError(f"{type} takes {model.__name__}, not {type_name(data)}")
            return data.wire()
        return model.model_validate(dict(data)).wire()

    def headers(self, webhook_id: str, signed_at: int, body: bytes) -> dict[str, str]:
        when = datetime.fromtimestamp(signed_at, tz=UTC)
        return {
            "content-type": "application/json",
            "webhook-id": webhook_id,
            "webhook-timestamp": str(signed_at),
            "webhook-signature": self.webhook.sign(webhook_id, when, body.decode("utf-8")),
        }

    # Sending ---------------------------------------------------------------------------------

    def send(
        self, type: str, data: Data | Mapping[str, Any], *, webhook_id: str | None = None
    ) -> Accepted:
        """Sign and post one event; raises `Refused` (or `Blocked`) with the server's errors."""
        return self.deliver(self.prepare(type, data, webhook_id=webhook_id))

    def deliver(self, event: PreparedEvent) -> Accepted:
        """Post a prepared event, retrying under the same webhook-id and body bytes."""
        response = self.post_signed(self.endpoint, event)
        return Accepted.model_validate(response.json())

    def post_signed(self, url: str, event: PreparedEvent) -> httpx.Response:
        def attempt(current: PreparedEvent) -> httpx.Response:
            headers = self.headers(current.webhook_id, current.signed_at, current.body)
            return self.http.post(url, content=current.body, headers=headers)

        holder = [event]

        def again() -> httpx.Response:
            if self.clock() - holder[0].signed_at > RESIGN_AFTER_S:
                holder[0] = replace(holder[0], signed_at=int(self.clock()))
            return attempt(holder[0])

        try:
            response = self.with_retries(
                again, what=f"{event.type} {event.webhook_id}", then=RESEND
            )
        except RetriesExhausted as exc:
            exc.event = event  # as first signed: `deliver` signs it afresh when it is stale
            raise
        if response.is_success:
            return response
        raise self.refusal(response, event_type=event.type)

    def refusal(self, response: httpx.Response, *, event_type: str | None = None) -> Refused:
        errors, body = errors_of(response)
        status = response.status_code
        if status == 401:
            refused = Unauthorized(status, errors, body=body)
            refused.clock_skew = clock_skew(response.headers.get("date"), self.clock())
            if refused.clock_skew is not None and abs(refused.clock_skew) > SKEW_HINT_S:
                refused.add_note(
                    f"this machine's clock is {refused.clock_skew:+.0f} s from the server's (its "
                    "Date header): a webhook-timestamp more than 5 minutes off is refused, so "
                    "set the clock right (NTP)"
                )
            return refused
        if status == 409 and any(e.get("loc") == "blockers" for e in errors):
            return Blocked(status, errors, body=body)
        return Refused(status, errors, body=body)

    def with_retries(
        self, call: Callable[[], httpx.Response], *, what: str, then: str = "try again later"
    ) -> httpx.Response:
        started = self.clock()
        policy = self.retry
        tries = 0
        while True:
            tries += 1
            status: int | None = None
            asked: float | None = None
            try:
                response = call()
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code not in RETRYABLE:
                    return response
                status = response.status_code
                asked = retry_after(response.headers.get("retry-after"), self.clock())
                problem = f"{status} {response.text[:200]}"
            if tries >= policy.attempts:
                raise RetriesExhausted(
                    f"{what}: no answer after {tries} tries ({problem}); {then}",
                    attempts=tries,
                    last_status=status,
                )
            wait = asked if asked is not None else policy.backoff(tries, self.rng)
            if asked is None:
                wait = min(wait, policy.max_delay)
            if self.clock() - started + wait > policy.deadline:
                raise RetriesExhausted(
                    f"{what}: {problem}; waiting {wait:g} s more would pass the retry "
                    f"deadline of {policy.deadline:g} s; {then}",
                    attempts=tries,
                    last_status=status,
                )
            self.sleep(wait)

    # The read API ----------------------------------------------------------------------------

    def get(self, path: str, model: type[M]) -> M:
        return model.model_validate(self.get_json(path))

    def get_json(self, path: str) -> Any:
        if not self.token:
            raise ValueError("the read API needs the agent's api_token (token=...)")
        url = f"{self.base_url}/api/v1{path}"
        headers = {"authorization": f"Bearer {self.token}"}
        response = self.with_retries(
            lambda: self.http.get(url, headers=headers), what=f"GET {path}"
        )
        if not response.is_success:
            raise self.refusal(response)
        return response.json()

    def run_detail(self, run: str) -> RunOut:
        return self.get(f"/runs/{seg(run)}", RunOut)

    def frontier(self, run: str) -> FrontierOut:
        return self.get(f"/runs/{seg(run)}/frontier", FrontierOut)

    def context(self, run: str, task: str) -> ContextOut:
        return self.get(f"/runs/{seg(run)}/tasks/{seg(task)}/context", ContextOut)

    def escalation(self, escalation_id: int) -> EscalationOut:
        return self.get(f"/escalations/{int(escalation_id)}", EscalationOut)

    def escalations(self, run: str) -> list[EscalationRow]:
        rows = self.get_json(f"/runs/{seg(run)}/escalations")
        return [EscalationRow.model_validate(row) for row in rows]

    # Orchestration ---------------------------------------------------------------------------

    def declare_run(
        self,
        run: str,
        tasks: Iterable[Task | Mapping[str, Any]],
        *,
        title: str = "",
        policy: str = "scoped",
        agent: str | None = None,
    ) -> "RunHandle":
        """Send `run.started` and return the run's handle (declaring the same run again with
        the same tasks is a no-op)."""
        specs = [t if isinstance(t, Task) else Task.model_validate(dict(t)) for t in tasks]
        data = RunStarted.model_validate(
            {"run": run, "title": title, "policy": policy, "tasks": specs, "agent": agent}
        )
        self.send("run.started", data)
        return self.run(run)

    def run(self, run: str) -> "RunHandle":
        """The handle of a run declared already."""
        from bulkhead_client.orchestration import RunHandle

        return RunHandle(self, run)

    def batch(self, *, max_events: int = 500, max_bytes: int = 16 * 1024 * 1024) -> "Batch":
        """A buffer of non-gating events (claim.posted, claim.checked, task.finished,
        capability.changed) sent together in signed batches of at most `max_events` and
        `max_bytes` of JSON (the server's WEBHOOK_MAX_BATCH_BYTES, 16 MiB unless changed)."""
        from bulkhead_client.batches import Batch

        return Batch(self, max_events=max_events, max_bytes=max_bytes)


def seg(value: str) -> str:
    return quote(value, safe="")


def type_name(value: object) -> str:
    return type(value).__name__


if TYPE_CHECKING:
    from bulkhead_client.batches import Batch
    from bulkhead_client.orchestration import RunHandle
