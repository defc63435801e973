"""Bulkhead in production shape on private services, for the fault suite.

Its own PostgreSQL cluster (initdb into a temporary directory, its own port, trust auth) and its
own `redis-server` (its own port, no persistence): the shared services are never touched, so the
suite can stop and start them. On them: gunicorn (2 workers), two Celery workers and beat, each
kept running by a supervisor thread the way systemd's `Restart=always` would. Agents are threads
that post signed events and retry as a well-behaved client does (the same webhook-id and body,
after `Retry-After`); the fleet's callback is a loopback receiver that dedupes on webhook-id.
"""

import contextlib
import glob
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from fleet import signing
from tests.conftest import Receiver

ROOT = Path(__file__).resolve().parents[2]
# The agents' thousands of requests are not worth a log line each.
logging.getLogger("httpx").setLevel(logging.WARNING)
PYTHON = sys.executable
BIN = Path(PYTHON).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def postgres_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def available() -> str:
    """What the suite lacks on this machine ('' when it can run)."""
    if postgres_bin() is None:
        return "PostgreSQL's server binaries (initdb, postgres)"
    if shutil.which("redis-server") is None:
        return "redis-server"
    return ""


def wait_until(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:g}s for {what}")
        time.sleep(interval)


class Postgres:
    """A private cluster. initdb refuses to run as root, so as root it runs as `postgres`."""

    def __init__(self) -> None:
        self.bin = postgres_bin()
        assert self.bin is not None
        self.dir = Path(tempfile.mkdtemp(prefix="bulkhead-faults-pg-"))
        self.port = free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = "postgres"
            shutil.chown(self.dir, user="postgres", group=None)
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self.run(
            [str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
             "--no-sync", "-E", "UTF8"],
        )  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def run(self, argv: list[str]) -> None:
        subprocess.run(argv, check=True, capture_output=True, user=self.user)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/bulkhead"

    def start(self) -> None:
        # fsync off: the suite crashes the server, never the machine, and what was written
        # survives in the kernel's buffers. Commits stay synchronous: a 202 means it is in the WAL.
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port),
                 "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.dir}",
                 "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=100"],
                stdout=log, stderr=subprocess.STDOUT, user=self.user,
            )  # fmt: skip
        wait_until(self.answers, 30, "the private PostgreSQL to accept connections")

    def answers(self) -> bool:
        try:
            with psycopg.connect(
                f"postgresql://postgres@127.0.0.1:{self.port}/postgres", connect_timeout=1
            ):
                return True
        except psycopg.OperationalError:
            return False

    def stop(self) -> None:
        """An immediate shutdown: the postmaster kills every backend, as in a crash; whatever
        was not committed is gone and the next start runs crash recovery."""
        if self.process is None:
            return
        self.process.send_signal(signal.SIGQUIT)
        self.process.wait(30)
        self.process = None

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url, connect_timeout=3) as conn:
            return list(conn.execute(sql, params).fetchall())

    def destroy(self) -> None:
        if self.process is not None:
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(15)
            if self.process.poll() is None:
                self.process.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class Redis:
    """A private redis-server: its own port, nothing saved to disk (a restart loses everything,
    as a cache and broker may)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until(self.answers, 10, "the private Redis to answer")

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.kill()
        self.process.wait(10)
        self.process = None

    def destroy(self) -> None:
        self.stop()


@dataclass
class Supervised:
    """A process kept running the way systemd's Restart=always keeps one: started again a
    second after it exits, each exit recorded."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    exits: list[tuple[float, int]] = field(default_factory=list)
    starts: int = 0
    process: subprocess.Popen[bytes] | None = None
    stopping: bool = False

    def start(self) -> None:
        self.starts += 1
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a kill reaches its pool too
            )
        threading.Thread(target=self.watch, args=(self.process,), daemon=True).start()

    def watch(self, process: subprocess.Popen[bytes]) -> None:
        code = process.wait()
        if self.stopping:
            return
        self.exits.append((time.time(), code))
        # A prefork pool's children may outlive a killed parent: end the whole group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        time.sleep(1.0)
        if not self.stopping:
            self.start()

    def kill(self) -> None:
        """SIGKILL to the process and its pool: no warm shutdown, nothing acknowledged."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)

    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stop(self) -> None:
        self.stopping = True
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)


CREATE_FLEET = """
import json
from django.conf import settings
from fleet import services
fleet = services.fleet_create(name="faults", callback_url=%r)
agents = []
for i in range(%d):
    agent, secret, _ = services.agent_create(fleet=fleet, name=f"agent-{i}", orchestrator=True)
    endpoint = settings.SITE_URL + f"/hooks/v1/agents/{agent.pk}/events"
    agents.append({"name": agent.name, "endpoint": endpoint, "signing_secret": secret})
print(json.dumps({"callback_secret": fleet.callback_secret, "agents": agents}))
"""


class Stack:
    """The app on private services: web, two workers, beat, a fleet and its callback receiver."""

    # Shortened so that a suite of four faults fits in about two minutes; the README gives the
    # production defaults and what each bounds.
    ENV = {
        "RECONCILE_EVERY_SECONDS": "2",
        "RECONCILE_GRACE_SECONDS": "3",
        "DELIVERY_TIMEOUT_SECONDS": "2",
        "DELIVERY_LEASE_SECONDS": "7",
        "DATABASE_RETRY_AFTER_SECONDS": "1",
    }

    def __init__(self, workdir: Path, agents: int = 4) -> None:
        self.workdir = workdir
        self.processes: list[Supervised] = []
        self.receiver: Receiver | None = None
        self.pg: Postgres | None = None
        self.redis: Redis | None = None
        try:
            self.build(agents)
        except BaseException:
            self.destroy()
            raise

    def build(self, agents: int) -> None:
        workdir = self.workdir
        self.pg = Postgres()
        with psycopg.connect(
            f"postgresql://postgres@127.0.0.1:{self.pg.port}/postgres", autocommit=True
        ) as conn:
            conn.execute("CREATE DATABASE bulkhead")
        self.redis = Redis()
        self.web_port = free_port()
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "DJANGO_"))},
            "DJANGO_SETTINGS_MODULE": "fleet.settings",
            "DATABASE_URL": self.pg.url,
            "CELERY_BROKER_URL": self.redis.url(0),
            "CACHE_URL": self.redis.url(1),
            "BULKHEAD_EMBEDDED": "0",
            "BULKHEAD_VAR_DIR": str(workdir / "var"),
            "SECRET_KEY": "faults-only-secret-key-not-for-production-0123456789abcdefghijkl",
            "SITE_URL": f"http://127.0.0.1:{self.web_port}",
            "SESSION_COOKIE_SECURE": "0",
            "CSRF_COOKIE_SECURE": "0",
            "SECURE_HSTS_SECONDS": "0",
            "CELERY_TASK_ALWAYS_EAGER": "0",
            "LOG_LEVEL": "INFO",
            **self.ENV,
        }
        (workdir / "var").mkdir(exist_ok=True)
        self.manage("migrate", "--no-input", "-v", "0")
        self.web = self.supervise(
            "web",
            [str(BIN / "gunicorn"), "fleet.wsgi", "--bind", f"127.0.0.1:{self.web_port}",
             "--workers", "2", "--threads", "4", "--timeout", "60"],
        )  # fmt: skip
        self.workers = [
            self.supervise(
                f"worker-{i}",
                [
                    PYTHON,
                    "-m",
                    "celery",
                    "-A",
                    "fleet",
                    "worker",
                    "--loglevel=INFO",
                    "--concurrency=2",
                    "--without-gossip",
                    "--without-mingle",
                    "-n",
                    f"faults-{i}@%h",
                ],
            )  # fmt: skip
            for i in range(2)
        ]
        self.beat = self.supervise(
            "beat",
            [PYTHON, "-m", "celery", "-A", "fleet", "beat", "--loglevel=INFO",
             "--schedule", str(workdir / "celerybeat-schedule")],
        )  # fmt: skip
        # While they start: the fleet, its callback and its agents, in one process.
        self.receiver = Receiver()
        printed = self.manage("shell", "-c", CREATE_FLEET % (self.receiver.url, agents))
        created = json.loads(printed.strip().splitlines()[-1])
        self.receiver.secret = created["callback_secret"]
        self.agents = [Agent(self, agent) for agent in created["agents"]]
        wait_until(self.web_answers, 60, "gunicorn to answer /healthz")
        for worker in self.workers:
            wait_until(
                lambda w=worker: " ready." in w.log.read_text(), 90, f"{worker.name} to be ready"
            )

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [PYTHON, "manage.py", *args], env=self.env, cwd=ROOT, capture_output=True, text=True
        )
        if done.returncode:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout

    def supervise(self, name: str, argv: list[str]) -> Supervised:
        process = Supervised(name, argv, self.env, self.workdir / f"{name}.log")
        process.start()
        self.processes.append(process)
        return process

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def web_answers(self) -> bool:
        try:
            return httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def readyz(self) -> tuple[int, dict[str, Any], str]:
        answer = httpx.get(f"{self.base_url}/readyz", timeout=10)
        return answer.status_code, answer.json(), answer.headers.get("retry-after", "")

    def worker_holding(self, peer_port: int) -> "Supervised":
        """The worker whose process (or pool child) holds the TCP connection from `peer_port`."""
        pid = socket_owner(peer_port)
        group = os.getpgid(pid)
        for worker in self.workers:
            if worker.process is not None and worker.process.pid == group:
                return worker
        raise LookupError(f"no worker owns pid {pid} (process group {group})")

    def destroy(self) -> None:
        for process in self.processes:
            process.stop()
        if self.receiver is not None:
            self.receiver.release.set()
            self.receiver.stop()
        if self.redis is not None:
            self.redis.destroy()
        if self.pg is not None:
            self.pg.destroy()

    # What the database says: PostgreSQL is the truth the suite reconciles against.

    def applied(self, webhook_ids: list[str]) -> dict[str, int]:
        rows = self.pg.query(
            "SELECT webhook_id, count(*) FROM fleet_event WHERE webhook_id = ANY(%s) "
            "GROUP BY webhook_id",
            webhook_ids,
        )
        return {webhook_id: count for webhook_id, count in rows}

    def deliveries(self, runs: list[str]) -> list[tuple[str, str, str, str]]:
        """(webhook_id, run, task, status) of each task.ready recorded for these runs."""
        return [
            (webhook_id, run, task, status)
            for webhook_id, run, task, status in self.pg.query(
                "SELECT webhook_id, payload->'data'->>'run', payload->'data'->>'task', status "
                "FROM fleet_delivery WHERE type = 'task.ready' AND payload->'data'->>'run' = ANY(%s)",
                runs,
            )
        ]

    def received_ready(self) -> dict[str, list[tuple[str, str]]]:
        """The receiver's log of task.ready, by webhook-id: [(run, task), …] per receipt."""
        with self.receiver.lock:
            found: dict[str, list[tuple[str, str]]] = {}
            for r in self.receiver.received:
                if r.type == "task.ready" and r.signed:
                    data = r.body["data"]
                    found.setdefault(r.webhook_id, []).append((data["run"], data["task"]))
            return found


def socket_owner(local_port: int) -> int:
    """The pid holding the loopback TCP socket whose local port is `local_port` (from /proc)."""
    inode = ""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == local_port and fields[9] != "0":
            inode = fields[9]  # 0: a closed connection's TIME_WAIT, which no process holds
            break
    if not inode:
        raise LookupError(f"no socket on local port {local_port}")
    target = f"socket:[{inode}]"
    for fd in glob.glob("/proc/[0-9]*/fd/*"):
        with contextlib.suppress(OSError):
            if os.readlink(fd) == target:
                return int(fd.split("/")[2])
    raise LookupError(f"no process holds {target}")


@dataclass
class Sent:
    webhook_id: str
    run: str
    tasks: list[str]
    statuses: list[int] = field(default_factory=list)  # every answer, in order (0: no answer)
    first_at: float = 0.0
    done_at: float = 0.0
    retry_after: list[str] = field(default_factory=list)


class Agent:
    """An agent posting run.started events (each a new run of `width` independent tasks, each of
    which the worker reports ready to the callback), retrying as a client should."""

    def __init__(self, stack: Stack, created: dict[str, Any]) -> None:
        self.stack = stack
        self.name = created["name"]
        self.endpoint = created["endpoint"]
        self.secret = created["signing_secret"]
        # An idle connection is dropped before gunicorn closes it (its keep-alive is 2 s): a
        # request sent on one the server is closing that moment fails in transport, which this
        # suite counts against the app. The client library retries such a failure instead.
        self.client = httpx.Client(timeout=30, limits=httpx.Limits(keepalive_expiry=1.0))

    def post_until_applied(self, sent: Sent, body: bytes, stop_by: float) -> None:
        sent.first_at = time.time()
        while time.time() < stop_by:
            headers = signing.sign(
                self.secret, msg_id=sent.webhook_id, timestamp=int(time.time()), body=body
            )
            headers["content-type"] = "application/json"
            try:
                answer = self.client.post(self.endpoint, content=body, headers=headers)
            except httpx.HTTPError:
                sent.statuses.append(0)
                time.sleep(0.5)
                continue
            sent.statuses.append(answer.status_code)
            if answer.status_code < 300:
                sent.done_at = time.time()
                return
            if answer.status_code == 503:
                sent.retry_after.append(answer.headers.get("retry-after", ""))
                time.sleep(float(answer.headers.get("retry-after") or 1))
                continue
            if answer.status_code >= 500:
                time.sleep(0.5)
                continue
            return  # a refusal: the suite counts it as a failure

    def post_run(self, width: int, stop_by: float) -> Sent:
        run = f"{self.name}-{uuid.uuid4().hex[:10]}"
        tasks = [f"t{i}" for i in range(width)]
        envelope = {
            "type": "run.started",
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "data": {
                "run": run,
                "title": f"fault traffic {run}",
                "tasks": [
                    {"key": key, "agent": self.name, "prerequisites": [], "capabilities": []}
                    for key in tasks
                ],
            },
        }
        sent = Sent(f"msg_{uuid.uuid4().hex}", run, tasks)
        self.post_until_applied(sent, json.dumps(envelope).encode(), stop_by)
        return sent


class Traffic:
    """Every agent posting runs in its own thread until stopped."""

    def __init__(self, stack: Stack, *, width: int = 2, pause: float = 0.2) -> None:
        self.stack = stack
        self.width = width
        self.pause = pause
        self.sent: list[Sent] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [
            threading.Thread(target=self.loop, args=(agent,), daemon=True) for agent in stack.agents
        ]

    def loop(self, agent: Agent) -> None:
        while not self.stopping.is_set():
            # A client gives up on an event after two minutes of retries.
            sent = agent.post_run(self.width, stop_by=time.time() + 120)
            with self.lock:
                self.sent.append(sent)
            time.sleep(self.pause)

    def __enter__(self) -> "Traffic":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(150)
