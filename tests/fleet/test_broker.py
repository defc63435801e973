"""The embedded broker: a message is never visible to a worker before it is whole."""

import os
import subprocess
import sys
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from kombu import Connection

from fleet import broker

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def channel(tmp_path: Path) -> Any:
    queue = tmp_path / "queue"
    queue.mkdir()
    options = {
        "data_folder_in": str(queue),
        "data_folder_out": str(queue),
        "control_folder": str(tmp_path / "control"),
        "store_processed": False,
    }
    (tmp_path / "control").mkdir()
    with Connection("filesystem://", transport=broker.Transport, transport_options=options) as c:
        yield c.default_channel


def test_a_message_being_written_is_not_taken_by_a_reader(channel, monkeypatch):
    seen_while_writing: list[object] = []
    real_dumps = broker.dumps

    def dumps_and_look(payload: Any) -> str:
        # The moment kombu's own transport has an empty file under its final name.
        try:
            seen_while_writing.append(channel._get("celery"))
        except Empty:
            seen_while_writing.append(None)
        except ValueError as exc:  # kombu's own transport: the empty file does not decode
            seen_while_writing.append(exc)
        return real_dumps(payload)

    monkeypatch.setattr(broker, "dumps", dumps_and_look)
    monkeypatch.setattr(broker.filesystem, "dumps", dumps_and_look)
    channel._put("celery", {"body": "whole"})

    assert seen_while_writing == [None]
    assert channel._get("celery") == {"body": "whole"}


def test_messages_are_taken_in_the_order_they_were_put(channel):
    for n in range(5):
        channel._put("celery", {"n": n})

    assert [channel._get("celery")["n"] for _ in range(5)] == [0, 1, 2, 3, 4]
    with pytest.raises(Empty):
        channel._get("celery")


def test_the_embedded_default_uses_this_transport():
    # Without CELERY_BROKER_URL, as a newcomer runs it (this suite may itself run on Redis).
    env = {k: v for k, v in os.environ.items() if k != "CELERY_BROKER_URL"}
    code = "from fleet.celery import app; print(app.connection_for_write().get_transport_cls())"
    done = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "fleet.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "fleet.broker.Transport" in done.stdout


def detached_redis_channel(transport: Any) -> tuple[Any, Any]:
    """A channel on a real Redis whose connection kombu has already detached, as Celery finds it
    when it closes the connection it lost to a Redis outage."""
    from django.conf import settings

    url = settings.CELERY_BROKER_URL
    if not url.startswith("redis"):
        url = "redis://127.0.0.1:6379/0"
    connection = Connection(url, transport=transport)
    channel = connection.channel()
    channel.qos._delivered["tag"] = None  # one message it holds unacknowledged
    channel._pool = None
    channel.connection.client = None
    return connection, channel


def test_a_redis_channel_closed_after_the_connection_went_away_is_a_connection_error():
    connection, channel = detached_redis_channel(broker.RedisTransport)
    connection.maybe_close_channel(channel)  # ignores connection errors only
    assert channel.closed


def test_kombus_own_redis_channel_stops_the_worker_there():
    """What the subclass is for: kombu's own transport raises what Celery does not ignore."""
    from kombu.transport.redis import Transport

    connection, channel = detached_redis_channel(Transport)
    with pytest.raises(AttributeError, match="hostname"):
        connection.maybe_close_channel(channel)


def test_a_redis_broker_uses_the_surviving_transport():
    code = "from fleet.celery import app; print(app.connection_for_write().get_transport_cls())"
    done = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "fleet.settings",
            "CELERY_BROKER_URL": "redis://127.0.0.1:6379/9",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "fleet.broker.RedisTransport" in done.stdout
