"""One live Bulkhead for the clients' end-to-end tests: gunicorn on an ephemeral port, on the
test database, beside the session's real Celery worker. Tests that use it commit their data."""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleet import services
from fleet.models import Fleet
from tests.conftest import database_url

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class LiveApp:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def endpoint(self, agent_id: Any) -> str:
        return f"{self.url}/hooks/v1/agents/{agent_id}/events"


@pytest.fixture(scope="session")
def live_app_process(django_db_setup: None, tmp_path_factory: Any) -> Iterator[LiveApp]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("live") / "web.log"
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "fleet.settings",
        "SITE_URL": url,
        "SESSION_COOKIE_SECURE": "0",
        "CSRF_COOKIE_SECURE": "0",
        "SECURE_HSTS_SECONDS": "0",
    }
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "fleet.wsgi", "--bind", f"127.0.0.1:{port}",
             "--workers", "1", "--threads", "8", "--timeout", "60"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    app = LiveApp(url, process, log)
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("the live app did not start:\n" + log.read_text())
        time.sleep(0.1)
    yield app
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture
def live_app(worker: Any, live_app_process: LiveApp) -> LiveApp:
    """The live app, and the real worker, for a test whose data is committed."""
    assert live_app_process.process.poll() is None, live_app_process.log.read_text()
    return live_app_process


@dataclass
class Credentials:
    endpoint: str
    secret: str
    token: str


def credentials(live: LiveApp, fleet: Fleet, name: str, **kwargs: Any) -> Credentials:
    agent, secret, token = services.agent_create(fleet=fleet, name=name, **kwargs)
    return Credentials(live.endpoint(agent.pk), secret, token)
