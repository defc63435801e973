"""The signed webhook intake: authenticate, deduplicate, validate, apply in one transaction."""

import hashlib
import json
import logging
import math
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.cache import DEFAULT_CACHE_ALIAS, caches
from django.core.cache.backends.redis import RedisCache
from django.db import DataError, IntegrityError, OperationalError, transaction
from django.utils import timezone

from fleet import keyring, rows, signing
from fleet.dispatch import HANDLERS, Context, reference_errors
from fleet.errors import Refusal, error, errors_body, rolled_back
from fleet.errors import body as refusal_body
from fleet.events import Strict, loads, parse, partial_of
from fleet.models import Agent, Event

log = logging.getLogger(__name__)

UNAUTHORIZED = errors_body([error("webhook-signature", "authentication failed")])
WEBHOOK_ID_MAX_CHARS = 200  # Event.webhook_id
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


def authenticate(agent_id: str, headers: Mapping[str, str], body: bytes) -> Agent | None:
    """The agent whose active key signed the body (its keys cached); None for any failure."""
    try:
        key = uuid.UUID(agent_id)
    except ValueError:
        key = None
    agent, secrets = keyring.agent_and_secrets(key) if key else (None, [])
    # An unknown agent costs the same HMAC work as a known one with a wrong key.
    try:
        signing.verify(secrets or ["whsec_" + "A" * 32], headers=headers, body=body)
    except signing.SignatureError:
        return None
    return agent


def webhook_id_problem(webhook_id: str) -> str | None:
    """Why a (correctly signed) webhook-id cannot be stored as the event's idempotency key."""
    if len(webhook_id) > WEBHOOK_ID_MAX_CHARS:
        return f"is {len(webhook_id)} characters; at most {WEBHOOK_ID_MAX_CHARS}"
    if _CONTROL.search(webhook_id):
        return "contains a control character"
    if _SURROGATE.search(webhook_id):
        return "contains an unpaired surrogate (\\ud800-\\udfff), which is not valid Unicode"
    return None


def over_rate(agent: Agent) -> int:
    """Seconds to wait if the agent is over its limit in the current window, else 0.

    The count lives in the cache: with the cache unreachable the limit is not enforced (the
    event is applied, and the outage logged once a minute), never a 500.
    """
    window = settings.AGENT_RATE_WINDOW_SECONDS
    now = time.time()
    slot = int(now // window)
    key = f"rate:{agent.pk}:{slot}"
    try:
        count = counted(key, timeout=window * 2)
    except Exception as exc:  # the cache backend's own errors: redis, memcached, a file system
        cache_unreachable(exc)
        return 0
    if count > settings.AGENT_RATE_LIMIT:
        return max(1, math.ceil((slot + 1) * window - now))
    return 0


def counted(key: str, *, timeout: int) -> int:
    """One more request under `key`, which lapses `timeout` seconds after the first: on Redis
    one round trip (SET NX with the expiry, then INCR), elsewhere the cache's own calls."""
    backend = caches[DEFAULT_CACHE_ALIAS]  # `cache` is a proxy: never an instance of a backend
    if isinstance(backend, RedisCache):
        name = backend.make_and_validate_key(key)
        pipeline = backend._cache.get_client(name, write=True).pipeline(transaction=False)
        pipeline.set(name, 0, ex=timeout, nx=True)
        pipeline.incr(name)
        return int(pipeline.execute()[1])
    backend.add(key, 0, timeout=timeout)
    try:
        return int(backend.incr(key))
    except ValueError:
        backend.set(key, 1, timeout=timeout)
        return 1


_last_warned = 0.0


def cache_unreachable(exc: Exception) -> None:
    global _last_warned
    if time.monotonic() - _last_warned >= 60:
        _last_warned = time.monotonic()
        log.warning("cache unreachable, rate limits not enforced: %s", exc)


def actor_for(sender: Agent, data: Strict) -> Agent:
    return actor_named(sender, getattr(data, "agent", None))


def actor_named(sender: Agent, name: str | None) -> Agent:
    if name is None or name == sender.name:
        return sender
    if not sender.is_orchestrator:
        raise Refusal(
            [error("data.agent", "only an orchestrator may act as another agent")], status=403
        )
    actor = rows.one(Agent.objects.filter(fleet_id=sender.fleet_id, name=name))
    if actor is None:
        raise Refusal([error("data.agent", f"no agent {name!r} in this fleet")])
    return actor


def actor_errors(sender: Agent, name: object) -> list[dict[str, str]]:
    """Whom a refused event's data.agent names, checked beside its other errors."""
    if not isinstance(name, str):
        return []
    try:
        actor_named(sender, name)
    except Refusal as exc:
        return exc.errors
    return []


def event_time(stamp: datetime) -> datetime:
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def receive(*, agent_id: str, headers: Mapping[str, str], body: bytes, content_type: str) -> Reply:
    if content_type.split(";")[0].strip().lower() != "application/json":
        return Reply(415, errors_body([error("content-type", "must be application/json")]))
    if len(body) > settings.WEBHOOK_MAX_BODY_BYTES:
        limit = settings.WEBHOOK_MAX_BODY_BYTES
        return Reply(413, errors_body([error("body", f"larger than the limit of {limit} bytes")]))
    agent = authenticate(agent_id, headers, body)
    if agent is None:
        return Reply(401, UNAUTHORIZED)
    bad_id = webhook_id_problem(headers["webhook-id"])
    if bad_id:
        return Reply(400, errors_body([error("webhook-id", bad_id)]))
    wait = over_rate(agent)
    if wait:
        return Reply(
            429,
            errors_body([error("agent", f"too many requests; retry in {wait} s")]),
            {"Retry-After": str(wait)},
        )
    webhook_id = headers["webhook-id"]
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = f"byte 0x{body[exc.start]:02x} at offset {exc.start}"
        return unreadable(
            agent,
            webhook_id,
            body,
            Reply(400, errors_body([error("body", f"not valid UTF-8: {bad}")])),
        )
    try:
        raw, repeated = loads(text)
    except Refusal as exc:
        return unreadable(agent, webhook_id, body, Reply(exc.status, refusal_body(exc)))
    except ValueError as exc:
        refused = Reply(400, errors_body([error("body", f"not valid JSON: {exc}")]))
        return unreadable(agent, webhook_id, body, refused)
    return apply(agent=agent, webhook_id=webhook_id, body=body, raw=raw, repeated=repeated)


def unreadable(agent: Agent, webhook_id: str, body: bytes, refused: Reply) -> Reply:
    """A body that cannot be read: a used webhook-id is a conflict (409) before a bad body."""
    return replayed(agent, webhook_id, hashlib.sha256(body).hexdigest()) or refused


def replayed(agent: Agent, webhook_id: str, *digests: str) -> Reply | None:
    """The first response again if the webhook-id was applied (409 if for another body)."""
    previous = rows.one(Event.objects.filter(agent=agent, webhook_id=webhook_id))
    return replay(previous, *digests) if previous is not None else None


def canonical(envelope: object) -> bytes:
    """An event's body as idempotency compares it: canonical JSON (keys sorted, no spaces), so
    the same event is the same whether posted alone (spaced as its sender likes) or in a batch."""
    text = json.dumps(envelope, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


def apply(
    *,
    agent: Agent,
    webhook_id: str,
    body: bytes,
    raw: object,
    imported: bool = False,
    repeated: Sequence[dict[str, str]] = (),
) -> Reply:
    """Apply one event once: a replay of its webhook-id gets the first response.

    The event row keeps the digest of the canonical envelope; an older row may hold the digest
    of the raw body, which a replay matches as well."""
    digest = hashlib.sha256(canonical(raw)).hexdigest()
    digests = (digest, hashlib.sha256(body).hexdigest())
    ready = prepare(
        agent,
        raw,
        imported=imported,
        repeated=repeated,
        used=lambda: replayed(agent, webhook_id, *digests),
    )
    if isinstance(ready, Reply):
        return ready
    envelope, data, actor = ready
    for attempt in range(3):
        try:
            with transaction.atomic():
                event = applied(agent, actor, webhook_id, digest, envelope, data, imported)
                # The unique (agent, webhook_id) row goes in last, with the response: a
                # concurrent copy waits on it here and rolls back with an IntegrityError.
                rows.add(event)
            return Reply(202, answer(event))
        except Refusal as exc:
            # A copy applied first may have moved the state on (the task is running now).
            return replayed(agent, webhook_id, *digests) or Reply(exc.status, refusal_body(exc))
        except IntegrityError:
            used = replayed(agent, webhook_id, *digests)
            if used is not None:
                return used
            # A concurrent event created the same row first (a run, a claim): apply again.
        except DataError as exc:
            # A value the database will not store that the checks before let through: the
            # sender's to fix, nothing of it written (never a 500).
            return Reply(422, errors_body([error("body", unstorable(exc))]))
        except OperationalError as exc:
            if not rolled_back(exc) or attempt == 2:
                raise
            # PostgreSQL chose this transaction to break a deadlock with a concurrent event
            # (two agents joining one escalation at once): nothing of it was written; again.
    return Reply(409, errors_body([error("body", "conflicts with a concurrent event; retry")]))


def unstorable(exc: DataError) -> str:
    said = str(exc.__cause__ or exc).strip().splitlines()
    return f"holds a value the database cannot store: {said[0] if said else 'no reason given'}"


def prepare(
    agent: Agent,
    raw: object,
    *,
    imported: bool,
    repeated: Sequence[dict[str, str]],
    used: Callable[[], Reply | None],
) -> tuple[Any, Strict, Agent] | Reply:
    """The event's envelope, data and actor, or the refusal naming every bad field and
    reference (`used()`, the first response, when its id was applied already: a used id is a
    conflict before it is a bad body)."""
    try:
        envelope, data = parse(raw, imported=imported, repeated=repeated)
        packet_too_big(data)
    except Refusal as exc:
        first = used()
        if first is not None:
            return first
        errors = exc.errors
        if exc.partial is not None:
            named = {e["loc"] for e in errors}
            more = actor_errors(agent, exc.partial.fields.get("agent"))
            more += reference_errors(agent, exc.partial)
            errors = errors + [e for e in more if e["loc"] not in named]
        return Reply(exc.status, errors_body(errors))
    try:
        actor = actor_for(agent, data)
    except Refusal as exc:
        first = used()
        if first is not None:
            return first
        errors = exc.errors
        if exc.status == 422:  # an unknown agent: name the other bad references with it
            errors += reference_errors(agent, partial_of(envelope.type, envelope.data, data, []))
        return Reply(exc.status, errors_body(errors))
    return envelope, data, actor


def applied(
    agent: Agent,
    actor: Agent,
    webhook_id: str,
    digest: str,
    envelope: Any,
    data: Strict,
    imported: bool,
) -> Event:
    """Apply the event (in the caller's transaction); its row, with the response, to store."""
    # A live event happened when Bulkhead received it (the server's clock: an agent's own stamp
    # cannot stretch or shrink minutes); a past run's, at its envelope's time.
    received = timezone.now()
    occurred = event_time(envelope.timestamp)
    context = Context(
        sender=agent, actor=actor, at=occurred if imported else received, imported=imported
    )
    return event_row(
        agent, webhook_id, digest, envelope, HANDLERS[envelope.type](context, data), received
    )


def event_row(
    agent: Agent,
    webhook_id: str,
    digest: str,
    envelope: Any,
    handled: dict[str, Any],
    received: datetime,
) -> Event:
    """The applied event's row, with the response its handler gave (`handled`)."""
    occurred = event_time(envelope.timestamp)
    response = {"type": envelope.type, **handled}
    return rows.new(
        Event,
        fleet_id=agent.fleet_id,
        agent_id=agent.pk,
        webhook_id=webhook_id,
        body_sha256=digest,
        type=envelope.type,
        data=envelope.data,
        occurred_at=occurred,
        received_at=received,
        response_status=202,
        response=response,
    )


def answer(event: Event) -> dict[str, Any]:
    """The reply to an applied event: its stored response, led by the event's own id."""
    return {"event": str(event.pk), **event.response}


def replay(previous: Event, *digests: str) -> Reply:
    if previous.body_sha256 not in digests:
        return Reply(409, errors_body([error("webhook-id", "already used for a different body")]))
    return Reply(previous.response_status, answer(previous))


def packet_too_big(data: Strict) -> None:
    packet = getattr(data, "packet", None)
    if packet is None:
        return
    size = len(json.dumps(packet, separators=(",", ":"), ensure_ascii=False).encode())
    if size > settings.WEBHOOK_MAX_PACKET_BYTES:
        limit = settings.WEBHOOK_MAX_PACKET_BYTES
        raise Refusal([error("data.packet", f"larger than the limit of {limit} bytes")], status=413)
