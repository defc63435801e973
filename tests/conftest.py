"""Shared fixtures: a fleet with agents, a signed-webhook client, the desk and its reviewers, a
callback receiver, the real worker and waits on what it does, service checks."""

import inspect
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from celery._state import _set_task_join_will_block  # type: ignore[attr-defined]
from django.db import connection
from django.test import Client, TestCase
from standardwebhooks.webhooks import Webhook

from fleet import services, signing
from fleet.celery import app as celery_app
from fleet.models import Agent, ApiToken, Fleet
from fleet.stories import story_clock

REQUIRE_SERVICES = os.environ.get("BULKHEAD_REQUIRE_SERVICES", "") == "1"


def on_postgres() -> bool:
    return connection.vendor == "postgresql"


def needs(service: str, available: bool) -> None:
    """A test that needs a missing service skips locally and fails where services are required."""
    if available:
        return
    if REQUIRE_SERVICES:
        pytest.fail(f"needs {service}, which this run is configured to have")
    pytest.skip(f"needs {service}")


@pytest.fixture(autouse=True)
def required_services(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("postgres"):
        needs("PostgreSQL (set DATABASE_URL=postgresql://...)", on_postgres())


@pytest.fixture(autouse=True)
def eager_celery(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tasks run inline unless the test drives a real worker."""
    eager = request.node.get_closest_marker("worker") is None
    # Celery keeps "a task is running here" in one flag per process, which eager tasks run in
    # two threads at once (the concurrency tests) may leave set: it would refuse every later
    # `.get()` of this process. No task runs between tests: clear it.
    _set_task_join_will_block(False)
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = eager
    yield
    celery_app.conf.task_always_eager = previous


@pytest.fixture(autouse=True)
def clear_cache() -> Iterator[None]:
    from django.core.cache import cache

    cache.clear()
    yield


def wsgi_headers(headers: dict[str, str]) -> dict[str, str]:
    """HTTP headers as the test client takes them: webhook-id as HTTP_WEBHOOK_ID."""
    return {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}


class Sender:
    """An agent that signs and posts events to the webhook, as a real agent would."""

    def __init__(self, client: Any, agent: Agent, secret: str) -> None:
        self.client = client
        self.agent = agent
        self.secret = secret

    @property
    def path(self) -> str:
        return f"/hooks/v1/agents/{self.agent.pk}/events"

    def body(self, type: str, data: dict[str, Any], timestamp: str | None = None) -> bytes:
        envelope = {"type": type, "timestamp": timestamp or "2026-12-02T10:00:00Z", "data": data}
        return json.dumps(envelope).encode()

    def headers(
        self,
        body: bytes,
        *,
        webhook_id: str | None = None,
        stamp: int | None = None,
        secret: str | None = None,
    ) -> dict[str, str]:
        return signing.sign(
            secret or self.secret,
            msg_id=webhook_id or f"msg_{uuid.uuid4().hex}",
            timestamp=stamp if stamp is not None else int(time.time()),
            body=body,
        )

    def post_raw(
        self, body: bytes, headers: dict[str, str], content_type: str = "application/json"
    ) -> Any:
        extra = wsgi_headers(headers)
        # In a test transaction nothing commits: run the after-commit work as a commit would.
        with TestCase.captureOnCommitCallbacks(execute=True):
            return self.client.generic("POST", self.path, body, content_type=content_type, **extra)

    def post(
        self,
        type: str,
        data: dict[str, Any],
        *,
        webhook_id: str | None = None,
        timestamp: str | None = None,
        received: str | None = None,
    ) -> Any:
        """Post an event; `timestamp` is the envelope's (the agent's own clock), `received` when
        the server receives it: its clock reads that while it applies the event and the work
        after commit (a live event's time is the server's). The envelope says `received` too
        unless `timestamp` is given."""
        body = self.body(type, data, timestamp or received)
        if received is None:
            return self.post_raw(body, self.headers(body, webhook_id=webhook_id))
        with story_clock(datetime.fromisoformat(received)):
            return self.post_raw(body, self.headers(body, webhook_id=webhook_id))


@pytest.fixture
def fleet(db: None) -> Fleet:
    return services.fleet_create(name="acme")


def make_sender(client: Any, fleet: Fleet, name: str, **kwargs: Any) -> Sender:
    agent, secret, _ = services.agent_create(fleet=fleet, name=name, **kwargs)
    return Sender(client, agent, secret)


@pytest.fixture
def planner(client: Any, fleet: Fleet) -> Sender:
    return make_sender(client, fleet, "planner", role="planning", orchestrator=True)


@pytest.fixture
def coder(client: Any, fleet: Fleet) -> Sender:
    return make_sender(client, fleet, "coder", role="coding")


def task(key: str, agent: str = "coder", **fields: Any) -> dict[str, Any]:
    return {"key": key, "agent": agent, "prerequisites": [], "capabilities": [], **fields}


@pytest.fixture
def token(planner: Sender) -> str:
    """The planner's API token, for the read API."""
    return ApiToken.issue(planner.agent)[1]


def committed(call: Any, *args: Any, **kwargs: Any) -> Any:
    """Run `call` and its after-commit callbacks, as a committed transaction would."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        return call(*args, **kwargs)


# The desk: tests/escalations/desk.py builds on Sender above, so it is imported where it is used.

REFUSED_CALLBACK = "http://127.0.0.1:9/bulkhead"  # refused at once: nothing leaves the machine


@pytest.fixture
def desk_callback_url() -> str:
    """The desk fleet's callback: none, unless a module overrides this fixture."""
    return ""


@pytest.fixture
def desk(client: Any, fleet: Fleet, desk_callback_url: str) -> Any:
    """The desk's fleet (an orchestrator and two coders) with its tier-discounts run declared."""
    from tests.escalations.desk import Desk

    if desk_callback_url:
        fleet.callback_url = desk_callback_url
        fleet.save()
    desk = Desk(client, fleet)
    desk.run()
    return desk


@pytest.fixture
def alice(fleet: Fleet) -> Any:
    """A reviewer of acme."""
    from tests.escalations.desk import member

    return member("alice", fleet)


def signed_in(user: Any) -> Client:
    browser = Client()
    browser.force_login(user)
    return browser


@pytest.fixture
def browser(alice: Any) -> Client:
    """Alice's browser, signed in."""
    return signed_in(alice)


# A fleet's callback on loopback, for the notifications a fleet is sent.

HANG = "hang"


@dataclass(frozen=True)
class Answer:
    """A script entry with a body: sent at once, or `slowly` (its headers at once, then one byte
    every `slowly` seconds until the body ends or the receiver is released)."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    slowly: float = 0.0


@dataclass
class Received:
    webhook_id: str
    type: str
    body: dict[str, Any]
    headers: dict[str, str]
    signed: bool  # the signature verified with the fleet's secret
    peer: int = 0  # the sender's port: one per connection
    at: float = field(default_factory=time.time)  # when it arrived


class Receiver:
    """A fleet's callback: verifies each signature and answers from a script (then 200).

    A script entry is a status, (status, headers), an `Answer` (with a body), or HANG: hold the
    request until released.
    `stop()` closes the port (the receiver is down: connections are refused); `start()` opens
    the same port again. With `keep_alive` it speaks HTTP/1.1 and keeps connections open.
    """

    def __init__(self, keep_alive: bool = False) -> None:
        self.keep_alive = keep_alive
        self.secret = ""
        self.received: list[Received] = []
        self.body_bytes_sent = 0  # of the answers' bodies, as far as the sender took them
        self.script: list[Any] = []
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.port = 0
        self.server: ThreadingHTTPServer | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/bulkhead"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if self.keep_alive else "HTTP/1.0"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    Webhook(receiver.secret).verify(body, headers)
                    signed = True
                except Exception:
                    signed = False
                data = json.loads(body)
                with receiver.lock:
                    receiver.received.append(
                        Received(
                            headers.get("webhook-id", ""),
                            data["type"],
                            data,
                            headers,
                            signed,
                            self.client_address[1],
                        )
                    )
                    step = receiver.script.pop(0) if receiver.script else 200
                if step == HANG:
                    receiver.release.wait(60)
                    step = 200
                if not isinstance(step, Answer):
                    status, extra = step if isinstance(step, tuple) else (step, {})
                    step = Answer(status, b"ok", extra)
                try:
                    self.send_response(step.status)
                    for name, value in step.headers.items():
                        self.send_header(name, value)
                    self.send_header("content-length", str(len(step.body)))
                    self.end_headers()
                    if not step.slowly:
                        self.wfile.write(step.body)
                        receiver.body_bytes_sent += len(step.body)
                    for i in range(len(step.body) if step.slowly else 0):
                        self.wfile.write(step.body[i : i + 1])
                        self.wfile.flush()
                        receiver.body_bytes_sent += 1
                        if receiver.release.wait(step.slowly):
                            break
                except OSError:
                    pass  # the sender went away while we held it

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def ids(self) -> list[str]:
        return [r.webhook_id for r in self.received]

    def of_type(self, type: str) -> list[Received]:
        return [r for r in self.received if r.type == type]


def receiving(keep_alive: bool = False) -> Iterator[Receiver]:
    """A receiver for the length of a test (the body of every `receiver` fixture)."""
    found = Receiver(keep_alive)
    yield found
    found.release.set()
    found.stop()


def hook(fleet: Fleet, receiver: Receiver) -> Fleet:
    """Point the fleet's callback at the receiver, and tell the receiver the fleet's secret."""
    fleet.callback_url = receiver.url
    fleet.save(update_fields=["callback_url"])
    receiver.secret = fleet.callback_secret
    return fleet


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from receiving()


@pytest.fixture
def hooked(fleet: Fleet, receiver: Receiver) -> Fleet:
    return hook(fleet, receiver)


def database_url() -> str:
    """The URL of the database this test run uses (the test database), for child processes."""
    config = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{config['NAME']}"
    user = config.get("USER") or "postgres"
    host = config.get("HOST") or "127.0.0.1"
    port = config.get("PORT") or 5432
    password = f":{config['PASSWORD']}" if config.get("PASSWORD") else ""
    return f"postgresql://{user}{password}@{host}:{port}/{config['NAME']}"


def spawn_worker(log_path: Any) -> Any:
    """Start a real Celery worker process on the configured broker and the test database."""
    import subprocess
    import sys

    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "fleet.settings",
        "CELERY_TASK_ALWAYS_EAGER": "0",
        "RECONCILE_GRACE_SECONDS": "0",
    }
    log = open(log_path, "w")  # noqa: SIM115 - the process owns it
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "fleet", "worker", "--pool=threads", "--concurrency=4",
         "--loglevel=INFO", "--without-mingle", "--without-gossip", "-n", f"test-{uuid.uuid4().hex[:6]}@%h"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.time() + 60
    while "ready" not in log_path.read_text():
        if process.poll() is not None or time.time() > deadline:
            process.kill()
            raise RuntimeError("the worker did not start:\n" + log_path.read_text())
        time.sleep(0.1)
    process.log_path = log_path  # type: ignore[attr-defined]
    return process


def stop_worker(process: Any) -> None:
    import subprocess

    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def reset_broker() -> None:
    from django.conf import settings

    if settings.CELERY_BROKER_URL.startswith("redis"):
        import redis

        redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    else:
        import shutil

        shutil.rmtree(settings.BROKER_DIR, ignore_errors=True)
        for folder in ("queue", "processed", "control"):
            (settings.BROKER_DIR / folder).mkdir(parents=True, exist_ok=True)


class WorkerHandle:
    """The session's real worker; a test may kill it and start a fresh one."""

    def __init__(self, log_dir: Any) -> None:
        self.log_dir = log_dir
        self.starts = 0
        self.process = self.start()

    def start(self) -> Any:
        self.starts += 1
        return spawn_worker(self.log_dir / f"worker-{self.starts}.log")

    def kill(self) -> None:
        """SIGKILL: no warm shutdown, no acknowledgement, nothing handed back to the broker."""
        self.process.kill()
        self.process.wait()

    def restart(self) -> None:
        if self.process.poll() is None:
            stop_worker(self.process)
        self.process = self.start()

    def log(self) -> str:
        return str(self.process.log_path.read_text())


@pytest.fixture(scope="session")
def worker_process(django_db_setup: None, tmp_path_factory: Any) -> Iterator[WorkerHandle]:
    """One real Celery worker process for the session."""
    reset_broker()
    handle = WorkerHandle(tmp_path_factory.mktemp("worker"))
    yield handle
    if handle.process.poll() is None:
        stop_worker(handle.process)


@pytest.fixture
def worker(transactional_db: None, worker_process: Any) -> Iterator[Any]:
    """The real worker, for a test whose data is committed; tasks are sent, not run inline."""
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = False
    yield worker_process
    celery_app.conf.task_always_eager = previous
    quiesce()


def quiesce(timeout: float = 15.0) -> None:
    """Wait until the worker has nothing left to do, so the test database can be flushed."""
    eventually(worker_idle, timeout=timeout, what="the worker to finish its queued tasks")


def worker_idle() -> bool:
    """Nothing queued or outstanding, and no task running (so none is still committing)."""
    from django.conf import settings

    from escalations.models import FailurePacket
    from runs.models import Claim, FrontierChange

    if settings.CELERY_BROKER_URL.startswith("redis"):
        import redis

        queued = int(redis.Redis.from_url(settings.CELERY_BROKER_URL).llen("celery"))
    else:
        # The celery queue only: the broadcast below also leaves one for each killed worker.
        queued = len(list((settings.BROKER_DIR / "queue").glob("*.celery.msg")))
    busy = (
        FrontierChange.objects.exists()
        or Claim.objects.filter(verification_pending=True).exists()
        or FailurePacket.objects.filter(checks_pending=True).exists()
    )
    if queued or busy:
        return False
    # Asked last: what a task queued before it finished is then in the queue counted above.
    running = celery_app.control.inspect(timeout=2.0, limit=1).active() or {}
    return not any(running.values())


def eventually(check: Any, *, timeout: float = 20.0, interval: float = 0.1, what: str = "") -> Any:
    """Poll until `check()` is truthy (for work a real worker does); fail naming what it waited
    for (`what`, else the check itself) and the last value it gave."""
    deadline = time.monotonic() + timeout
    value = check()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = check()
    assert value, f"waited {timeout:g}s for {what or condition_of(check)}; last value {value!r}"
    return value


def condition_of(check: Any) -> str:
    """How a failed wait names its check: the function's name, or a lambda's source."""
    name = getattr(check, "__name__", repr(check))
    if name != "<lambda>":
        return name
    try:
        return " ".join(inspect.getsource(check).split())
    except (OSError, TypeError):
        return name


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
