"""Batches of signed events: one request, up to 500 events, each applied once on its own id.

`POST /hooks/v1/agents/<id>/batches` with `{"events": [{"id", "type", "timestamp", "data"}]}`,
signed as one body like a single event. The events are applied in order, each with the result a
single post of it would get (`{"results": [{"id", "status", "body"}]}`); an id applied before
(in an earlier request, or earlier in the same batch) gets its first result again, or a 409 when
its body differs. The batch is one transaction with a savepoint per event, its event rows one
insert and each run's frontier one recompute; a stretch of claim.posted and task.finished is
looked up at once and its common events written with a few bulk statements (runs/bulk.py; on
PostgreSQL the claims and the event rows with COPY, fleet/rows.py). When a concurrent
request applied one of its ids first, the batch is applied again event by event.
"""

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DataError, IntegrityError, OperationalError, connection, transaction
from django.utils import timezone

from fleet import dispatch, rows
from fleet.dispatch import Context
from fleet.errors import Refusal, error, errors_body, rolled_back
from fleet.errors import body as refusal_body
from fleet.event_json import loads
from fleet.intake import (
    UNAUTHORIZED,
    Reply,
    answer,
    applied,
    apply,
    authenticate,
    canonical,
    event_row,
    over_rate,
    prepare,
    replay,
    replayed,
    webhook_id_problem,
)
from fleet.models import Agent, Event
from runs import scheduler
from runs.bulk import Stretch

ITEM_FIELDS = ("id", "type", "timestamp", "data")
TOGETHER = ("claim.posted", "task.finished")  # the events that gate nothing


@dataclass(frozen=True)
class Item:
    """One event of a batch: its id, its envelope, and the digest its idempotency compares."""

    id: str
    raw: dict[str, Any]
    body: bytes
    repeated: tuple[dict[str, str], ...]

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.body).hexdigest()


def receive_batch(
    *, agent_id: str, headers: Mapping[str, str], body: bytes, content_type: str
) -> Reply:
    if content_type.split(";")[0].strip().lower() != "application/json":
        return Reply(415, errors_body([error("content-type", "must be application/json")]))
    if len(body) > settings.WEBHOOK_MAX_BATCH_BYTES:
        limit = settings.WEBHOOK_MAX_BATCH_BYTES
        return Reply(413, errors_body([error("body", f"larger than the limit of {limit} bytes")]))
    agent = authenticate(agent_id, headers, body)
    if agent is None:
        return Reply(401, UNAUTHORIZED)
    bad_id = webhook_id_problem(headers["webhook-id"])
    if bad_id:
        return Reply(400, errors_body([error("webhook-id", bad_id)]))
    wait = over_rate(agent)  # a batch is one request
    if wait:
        return Reply(
            429,
            errors_body([error("agent", f"too many requests; retry in {wait} s")]),
            {"Retry-After": str(wait)},
        )
    try:
        raw, repeated = loads(body.decode("utf-8"))
    except UnicodeDecodeError as exc:
        bad = f"byte 0x{body[exc.start]:02x} at offset {exc.start}"
        return Reply(400, errors_body([error("body", f"not valid UTF-8: {bad}")]))
    except Refusal as exc:
        return Reply(exc.status, refusal_body(exc))
    except ValueError as exc:
        return Reply(400, errors_body([error("body", f"not valid JSON: {exc}")]))
    try:
        items = batch_items(raw, repeated)
    except Refusal as exc:
        return Reply(exc.status, refusal_body(exc))
    return Reply(200, {"results": apply_batch(agent, items)})


def batch_items(raw: object, repeated: Sequence[dict[str, str]]) -> list[Item]:
    """The batch's events; Refusal naming every problem of the batch itself (an event's own
    type, timestamp and data are checked when it is applied, and refused on their own)."""
    limit = settings.WEBHOOK_MAX_BATCH_EVENTS
    if not isinstance(raw, dict):
        raise Refusal([error("body", 'must be a JSON object {"events": [...]}')])
    errors = [e for e in repeated if not e["loc"].startswith("events.")]
    errors += [
        error(name, "unknown field; a batch holds only events") for name in raw if name != "events"
    ]
    events = raw.get("events")
    if not isinstance(events, list):
        raise Refusal([*errors, error("events", "must be a list of events")])
    if len(events) > limit:
        msg = f"holds {len(events)} events; at most {limit} in one batch: send the rest in another"
        raise Refusal([error("events", msg)], status=413)
    if not events:
        errors.append(error("events", "is empty; send at least one event"))
    items = []
    for i, event in enumerate(events):
        loc = f"events.{i}"
        if not isinstance(event, dict):
            errors.append(error(loc, "must be an object with id, type, timestamp and data"))
            continue
        event_id = event.get("id")
        problem = (
            "is missing: each event has its own id, its idempotency key"
            if event_id is None
            else "must be a string"
            if not isinstance(event_id, str)
            else "is empty"
            if not event_id
            else webhook_id_problem(event_id)
        )
        if problem or not isinstance(event_id, str):
            errors.append(error(f"{loc}.id", problem or "must be a string"))
            continue
        envelope = {name: value for name, value in event.items() if name != "id"}
        prefix = f"{loc}."
        own = tuple(
            error(e["loc"].removeprefix(prefix), e["msg"])
            for e in repeated
            if e["loc"].startswith(prefix)
        )
        if any(e["loc"] == "id" for e in own):
            errors.append(error(f"{loc}.id", "sent more than once in one object"))
            continue
        items.append(Item(event_id, envelope, canonical(envelope), own))
    if errors:
        raise Refusal(errors)
    return items


def apply_batch(agent: Agent, items: Sequence[Item]) -> list[dict[str, Any]]:
    try:
        with transaction.atomic(), scheduler.batched():
            return _apply_in_bulk(agent, items)
    except (IntegrityError, DataError):
        # A concurrent request applied one of these ids (or created the same row) first, or
        # one event holds a value the database will not store: each on its own, its own result.
        return [result(item, one_by_one(agent, item)) for item in items]
    except OperationalError as exc:
        if not rolled_back(exc):
            raise
        # Chosen to break a deadlock with a concurrent request: nothing was written.
        return [result(item, one_by_one(agent, item)) for item in items]


def one_by_one(agent: Agent, item: Item) -> Reply:
    return too_large(item) or apply(
        agent=agent, webhook_id=item.id, body=item.body, raw=item.raw, repeated=item.repeated
    )


def too_large(item: Item) -> Reply | None:
    """An event larger than one posted alone may be is refused as that post would be."""
    limit = settings.WEBHOOK_MAX_BODY_BYTES
    if len(item.body) <= limit:
        return None
    return Reply(413, errors_body([error("body", f"larger than the limit of {limit} bytes")]))


def _apply_in_bulk(agent: Agent, items: Sequence[Item]) -> list[dict[str, Any]]:
    """Every event in this transaction; the event rows in one insert at the end, and each
    stretch of events that gate nothing looked up together and its common ones written in bulk."""
    first = stored(agent, {item.id for item in items})
    replies: list[Reply | Event] = []
    fresh: list[Event] = []
    stretch: Stretch | None = None
    for index, item in enumerate(items):
        large = too_large(item)
        if large is not None:
            replies.append(large)
            continue
        previous = first.get(item.id)
        if previous is not None:
            if previous.pk is None and previous.body_sha256 == item.digest:
                replies.append(previous)  # applied earlier in this batch: its result, once stored
            else:
                replies.append(replay(previous, item.digest))
            continue
        if item.raw.get("type") not in TOGETHER and stretch is not None:
            stretch.write()
            stretch = None
        ready = prepare(agent, item.raw, imported=False, repeated=item.repeated, used=lambda: None)
        if isinstance(ready, Reply):
            replies.append(ready)
            continue
        envelope, data, actor = ready
        if envelope.type in TOGETHER:
            stretch = stretch or Stretch(agent.fleet_id, named(items[index:]))
            reply = apply_in_stretch(stretch, agent, actor, item, envelope, data)
        else:
            reply = apply_in_batch(agent, item, envelope, data, actor)
        if isinstance(reply, Event):
            first[item.id] = reply
            fresh.append(reply)
        replies.append(reply)
    if stretch is not None:
        stretch.write()
    rows.insert(fresh)
    return [
        result(item, Reply(202, answer(reply)) if isinstance(reply, Event) else reply)
        for item, reply in zip(items, replies, strict=True)
    ]


def stored(agent: Agent, ids: set[str]) -> dict[str, Event]:
    """The agent's events stored under `ids`, by id.

    On PostgreSQL one probe of the (agent, webhook-id) index for each id: filtered by the agent
    and a list of ids, a planner whose statistics predate the agent's last thousands of events
    reads them all, on every batch."""
    if connection.vendor != "postgresql":
        return {e.webhook_id: e for e in Event.objects.filter(agent=agent, webhook_id__in=ids)}
    table = connection.ops.quote_name(Event._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {rows.columns(Event, 'e')} FROM unnest(%s::text[]) AS w(id) "  # noqa: S608
            # A subquery for each id, which the planner cannot turn into a scan of the agent's
            f"CROSS JOIN LATERAL (SELECT * FROM {table} WHERE agent_id = %s AND webhook_id = w.id "
            "LIMIT 1) e",
            [sorted(ids), agent.pk],
        )
        found = [rows.instance(Event, values) for values in cursor.fetchall()]
    return {e.webhook_id: e for e in found if e is not None}


def named(items: Sequence[Item]) -> list[tuple[str, str, str | None]]:
    """The (run, task, claim key or None) of the events that gate nothing starting `items`."""
    found: list[tuple[str, str, str | None]] = []
    for item in items:
        if item.raw.get("type") not in TOGETHER:
            break
        data = item.raw.get("data")
        if not isinstance(data, dict):
            continue
        run, task, claim = data.get("run"), data.get("task"), data.get("claim")
        key = claim.get("key") if isinstance(claim, dict) else None
        if isinstance(run, str) and isinstance(task, str):
            found.append((run, task, key if isinstance(key, str) else None))
    return found


def apply_in_stretch(
    stretch: Stretch, agent: Agent, actor: Agent, item: Item, envelope: Any, data: Any
) -> Reply | Event:
    """An event of the stretch: written in bulk when it is the common case, else on its own."""
    received = timezone.now()
    context = Context(sender=agent, actor=actor, at=received)
    handled = (
        stretch.post(dispatch.claim_posting(context, data))
        if envelope.type == "claim.posted"
        else stretch.finish(dispatch.task_finishing(context, data))
    )
    if handled is not None:
        return event_row(agent, item.id, item.digest, envelope, handled, received)
    stretch.write()  # the events before it first, as one by one would have
    reply = apply_in_batch(agent, item, envelope, data, actor)
    stretch.alone(data.run, data.task)
    return reply


def apply_in_batch(
    agent: Agent, item: Item, envelope: Any, data: Any, actor: Agent
) -> Reply | Event:
    try:
        with transaction.atomic():  # a savepoint: a refused event leaves nothing behind
            return applied(agent, actor, item.id, item.digest, envelope, data, False)
    except Refusal as exc:
        # A concurrent copy of it, committed since this batch looked its ids up, may be why it
        # is refused (its claim key is taken now): then it gets that copy's result.
        return replayed(agent, item.id, item.digest) or Reply(exc.status, refusal_body(exc))


def result(item: Item, reply: Reply) -> dict[str, Any]:
    return {"id": item.id, "status": reply.status, "body": reply.body}
