"""The broker: the longest countdown it keeps, the embedded one (kombu's filesystem transport),
and kombu's Redis transport made to survive the broker going away.

In the embedded one, messages appear in the queue whole: kombu's own transport creates the message file under its final name and then writes it, so a
worker listing the queue in between takes an empty file, fails to decode it and the message is
lost (seen as `JSONDecodeError` in the worker's log when the web process and the worker are busy
at once). Here a message is written under a name the reader skips and renamed into place.
"""

import logging
import math
import os
import uuid
from time import monotonic_ns
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from kombu.exceptions import ChannelError, OperationalError
from kombu.transport import filesystem
from kombu.transport import redis as kombu_redis
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError


class Channel(filesystem.Channel):
    # kombu's filesystem Channel already widens the virtual Channel's signature this way.
    def _put(self, queue: str, payload: dict[str, Any], **kwargs: Any) -> None:  # type: ignore[override]
        # Nanoseconds, zero-padded: the reader takes names in sorted order, and kombu's milliseconds
        # leave messages put within one millisecond in random order.
        name = f"{monotonic_ns():020d}_{uuid.uuid4()}.{queue}.msg"
        # A leading dot: the reader only takes names of the form `<stamp>_<uuid>.<queue>.msg`.
        partial = os.path.join(self.data_folder_out, f".{name}.part")
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, os.path.join(self.data_folder_out, name))
        except OSError as exc:
            raise ChannelError(f"Cannot add file {name!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel


class RedisChannel(kombu_redis.Channel):
    """When Redis goes away, Celery closes the lost connection; closing a channel gives its
    unacknowledged messages back to the broker, which needs a new client, built from the
    connection's parameters, and by then kombu has detached them: `AttributeError: 'NoneType'
    object has no attribute 'hostname'` (kombu issues 582 and 970). Celery ignores only
    connection errors while it closes, so the AttributeError stopped the worker ("Unrecoverable
    error"). Here it is the connection error it is: the close goes on, the worker reconnects, and
    the messages come back after the visibility timeout (the reconciler covers them sooner)."""

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection.client is None:
            raise RedisConnectionError("the broker connection is closed")
        params: dict[str, Any] = super()._connparams(asynchronous=asynchronous)  # type: ignore[misc]
        return params


class RedisTransport(kombu_redis.Transport):
    Channel = RedisChannel


# Redis hands a delayed message to a worker at once and redelivers it if it is not acknowledged
# within the visibility timeout; a countdown past that would run twice. Longer waits are kept
# in the database (a retry's not_before, a delivery's next_attempt_at) and picked up there.
DEFAULT_VISIBILITY_TIMEOUT_S = 3600


def countdown(seconds: float) -> float:
    """A countdown the broker will not redeliver early: at most half the visibility timeout."""
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}) or {}
    visibility = float(options.get("visibility_timeout", DEFAULT_VISIBILITY_TIMEOUT_S))
    return max(0.0, min(seconds, visibility / 2))


log = logging.getLogger(__name__)

# What a broker (or its Redis) being unreachable raises from a send; a task's own error in eager
# mode is none of these, so it still propagates.
UNREACHABLE = (OperationalError, RedisError, ConnectionError, OSError)


def on_its_way(key: str, seconds: float) -> bool:
    """Mark a send under `key` as on its way; False if one still is (its task has not started).

    The cache unreachable: True, so the send goes (a duplicate costs a little work; a send held
    back for nothing would leave it to the reconciler).
    """
    try:
        return bool(cache.add(f"on-its-way:{key}", 1, timeout=max(1, math.ceil(seconds))))
    except Exception:  # the cache backend's own errors: redis, memcached, a file system
        return True


def arrived(key: str) -> None:
    """The task sent under `key` started: what is recorded from now on needs a send of its own."""
    try:
        cache.delete(f"on-its-way:{key}")
    except Exception:  # unreachable: the mark expires on its own
        log.debug("cache unreachable; %s expires on its own", key)


def after_commit(
    task: Any,
    *args: Any,
    countdown: float | None = None,
    unless_on_its_way: tuple[str, float] | None = None,
    **kwargs: Any,
) -> None:
    """Enqueue `task` once the transaction commits; a broker that is down loses nothing.

    The database is the truth: every task wakes work that is recorded (a frontier change, a claim
    pending verification, an undecided attempt, a due decision or delivery), and the reconciler
    enqueues it again. So a send that fails after commit is logged, not raised: the event was
    applied and is answered as such, never with a 500.

    `unless_on_its_way` (key, seconds): no send while one under the same key is on its way, for
    a task that reads all the work recorded when it starts and calls `arrived(key)` first; the
    mark lapses after `seconds` in any case.
    """

    def send() -> None:
        if unless_on_its_way is not None and not on_its_way(*unless_on_its_way):
            return  # its task, when it starts, reads what this transaction recorded
        try:
            if countdown is None:
                task.delay(*args, **kwargs)
            else:
                task.apply_async(
                    args, countdown=countdown, **({"kwargs": kwargs} if kwargs else {})
                )
        except UNREACHABLE as exc:
            if unless_on_its_way is not None:
                arrived(unless_on_its_way[0])  # not on its way: the next one tries again
            log.warning(
                "broker unreachable, left to the reconciler: %s%r: %s", task.name, args, exc
            )

    transaction.on_commit(send)
