"""Shared fixtures: a fleet with agents, a signed-webhook client, the real worker, service checks."""

import json
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import TestCase

from fleet import services, signing
from fleet.celery import app as celery_app
from fleet.models import Agent, Fleet

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
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = eager
    yield
    celery_app.conf.task_always_eager = previous


@pytest.fixture(autouse=True)
def clear_cache() -> Iterator[None]:
    from django.core.cache import cache

    cache.clear()
    yield


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
        extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
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
    ) -> Any:
        body = self.body(type, data, timestamp)
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
    from django.conf import settings

    from runs.models import Claim, FrontierChange

    deadline = time.time() + timeout
    while time.time() < deadline:
        queued = 0
        if settings.CELERY_BROKER_URL.startswith("redis"):
            import redis

            queued = int(redis.Redis.from_url(settings.CELERY_BROKER_URL).llen("celery"))
        else:
            queued = len(list((settings.BROKER_DIR / "queue").glob("*.msg")))
        busy = (
            FrontierChange.objects.exists()
            or Claim.objects.filter(verification_pending=True).exists()
        )
        if not queued and not busy:
            break
        time.sleep(0.1)
    time.sleep(0.3)  # a task that just finished its writes may still be committing


def eventually(check: Any, *, timeout: float = 20.0, interval: float = 0.1) -> Any:
    """Poll until `check()` is truthy (for work a real worker does); fail with the last value."""
    deadline = time.time() + timeout
    value = check()
    while not value and time.time() < deadline:
        time.sleep(interval)
        value = check()
    assert value, "condition not met in time"
    return value


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
