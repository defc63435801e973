"""bench/desk: the reviewer's desk on PostgreSQL, Redis and a real worker, each against an anchor.

(a) From a reviewer's answer to the agent's `task.reframed`: escalations are opened through the
signed intake (task.started, then packet.submitted) on a fleet whose callback URL is a loopback
receiver in this process; each answer calls `escalation_answer` as the view does (outside any
transaction, so its after-commit enqueue is real) and is timed until the receiver holds the signed
`task.reframed` for that task; the worker is left idle before the next. The tables are analysed
once the escalations are open, as autovacuum would have. Anchor, interleaved with
the answers: a no-op Celery task on the same broker and worker whose only act is a bare POST to
the same receiver. Five answers and round trips warm up first. Prints p50/p95 of both, where the
answer's time goes, and the ratio of the p95s (goal: within 4x).
(b) The escalation queue (`/escalations/?agent=coder`, 50 a page) with 100,000 open escalations
over 10 fleets (bulk-created), rendered in-process by Django's test Client for a reviewer of all
ten, against the very SQL the page sent (captured once, replayed through psycopg on one
connection), interleaved. Prints p50/p95 of both, each statement's share, the slowest one's plan
and the ratio of the p95s (goal: within 3x); `--profile` adds a pyinstrument profile of the page
(printed anyway when the page misses its goal) and one of the answer service.

Run: `make bench` or `.venv/bin/python bench/desk.py [--answers 200] [--escalations 100000]
[--pages 200] [--concurrency N] [--profile]`; a smoke run: `--answers 20 --escalations 5000
--pages 30`. It uses the database `bulkhead_bench_desk` (dropped and created), Redis db 12
(flushed; BENCH_DESK_BROKER), Redis db 8 as the cache (flushed; BENCH_DESK_CACHE) and port BENCH_DESK_PORT (8777) for the receiver; the worker, the
receiver and the database go when it ends, failed or not.
"""

import argparse
import http.client
import io
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from celery import shared_task

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PG = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
DB = "bulkhead_bench_desk" + os.environ.get("BENCH_DB_SUFFIX", "")
BROKER = os.environ.get("BENCH_DESK_BROKER", "redis://127.0.0.1:6379/12")
CACHE = os.environ.get("BENCH_DESK_CACHE", "redis://127.0.0.1:6379/8")  # as in production
PORT = int(os.environ.get("BENCH_DESK_PORT", "8777"))
WARMUP = 5  # answers and pings before the measured ones (first connections, first imports)
FLEETS = 10
AGENTS = ("planner", "coder", "schema", "tester", "deployer")
CAPABILITIES = ([], ["forge"], ["db"], ["forge", "ci"])
TASKS_PER_RUN = 100
FILTER = {"agent": "coder"}


@shared_task(name="bench.desk.ping", ignore_result=True)
def ping(port: int, key: str) -> None:
    """The anchor's no-op task: say it ran with one bare POST to the receiver (nothing to build)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(
            "POST", f"/ping/{key}", body=b"{}", headers={"content-type": "application/json"}
        )
        conn.getresponse().read()
    finally:
        conn.close()


def sh(*args: str, check: bool = True) -> str:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if check and done.returncode:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def p50_p95(values: list[float]) -> tuple[float, float]:
    """In milliseconds; the 95th percentile interpolated within the sample (no extrapolation)."""
    if len(values) < 2:
        return values[0] * 1000, values[0] * 1000
    p95 = statistics.quantiles(values, n=20, method="inclusive")[18]
    return statistics.median(values) * 1000, p95 * 1000


def line(label: str, values: list[float]) -> str:
    p50, p95 = p50_p95(values)
    return f"{label:<44} p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  (n={len(values)})"


class Receiver:
    """The fleet's callback: a threaded loopback server that notes when each delivery arrived."""

    def __init__(self, port: int) -> None:
        self.arrived: dict[tuple[str, str], float] = {}
        self.secret = ""
        self.unsigned = 0
        self.received = 0
        self.changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                at = time.perf_counter()
                receiver.arrive(self.path, dict(self.headers.items()), body, at)
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def arrive(self, path: str, headers: dict[str, str], body: bytes, at: float) -> None:
        if path.startswith("/ping/"):
            key = ("ping", path.removeprefix("/ping/"))
        else:
            from fleet import signing

            try:
                signing.verify(
                    [self.secret], headers={k.lower(): v for k, v in headers.items()}, body=body
                )
            except signing.SignatureError:
                self.unsigned += 1
            payload = json.loads(body)
            data = payload.get("data", {})
            key = (payload.get("type", ""), str(data.get("task") or data.get("run") or ""))
        with self.changed:
            self.received += 1
            self.arrived.setdefault(key, at)
            self.changed.notify_all()

    def wait(self, key: tuple[str, str], timeout: float = 30.0) -> float | None:
        with self.changed:
            self.changed.wait_for(lambda: key in self.arrived, timeout=timeout)
            return self.arrived.get(key)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def quiesce(timeout: float = 180.0) -> None:
    """Until the worker has nothing left: no frontier to recompute, no delivery to send."""
    from fleet.models import Delivery
    from runs.models import FrontierChange

    deadline = time.monotonic() + timeout
    pending = Delivery.objects.filter(status=Delivery.Status.PENDING)
    while FrontierChange.objects.exists() or pending.exists():
        if time.monotonic() > deadline:
            stuck = list(pending.values("type", "attempts", "last_error")[:3])
            raise RuntimeError(f"the worker did not settle in {timeout:.0f} s: {stuck}")
        time.sleep(0.02)


def start_worker(log: Path, concurrency: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DATABASE_URL": f"{PG}/{DB}",
        "DJANGO_SETTINGS_MODULE": "fleet.settings",
        "CELERY_BROKER_URL": BROKER,
        "CACHE_URL": CACHE,
        "CELERY_TASK_ALWAYS_EAGER": "0",
        "LOG_LEVEL": "WARNING",
    }
    command = [str(Path(sys.executable).parent / "celery"), "-A", "fleet", "worker",
               "--include", "bench.desk", "--loglevel", "WARNING", "--without-mingle",
               "--without-gossip", "-n", f"bench-desk-{os.getpid()}@%h"]  # fmt: skip
    if concurrency:
        command += ["--concurrency", str(concurrency)]
    with log.open("wb") as out:
        # Its own process group, so that its pool goes with it whatever happens to this process.
        return subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop_worker(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is not None:
        return
    os.killpg(worker.pid, signal.SIGTERM)
    try:
        worker.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()


def packet(task: str, i: int) -> dict[str, Any]:
    """The seed's failure packet (tests/escalations/desk.py), one question per case."""
    return {
        "task": task,
        "tried": [
            "Resolve discount rule via customers.customer_tier (from plan)",
            "Reframed with live schema from information_schema",
        ],
        "ruled_out": [
            {
                "hypothesis": "column exists under another name",
                "how": "searched customers, accounts, loyalty_* for tier-like columns; none found",
            }
        ],
        "evidence": [
            {
                "kind": "query_result",
                "source": "SELECT column_name FROM information_schema.columns WHERE table_name = 'customers'",
                "payload_hash": "sha256:" + "9f3a" * 16,
            }
        ],
        "smallest_unblocking_question": f"Where does a customer's tier come from (case {i})?",
    }


def answer_to_reframed(args: argparse.Namespace, receiver: Receiver) -> None:
    from django.core.management import call_command
    from django.test import Client

    from escalations import services as desk
    from escalations.models import Escalation
    from fleet import services, signing
    from fleet.models import Delivery, DeliveryAttempt, Fleet

    callback = f"http://127.0.0.1:{PORT}/bulkhead"
    call_command("fleet_create", "desk", "--callback-url", callback, stdout=io.StringIO())
    fleet = Fleet.objects.get(name="desk")
    receiver.secret = fleet.callback_secret
    planner, secret, _ = services.agent_create(
        fleet=fleet, name="planner", role="planning", orchestrator=True
    )
    services.agent_create(fleet=fleet, name="coder", role="coding")
    reviewer, _ = services.member_add(username="desk-reviewer", fleet=fleet, role="reviewer")
    client = Client()

    def post(type: str, data: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(
            {"type": type, "timestamp": "2026-12-02T10:00:00Z", "data": data}
        ).encode()
        headers = signing.sign(
            secret, msg_id=f"msg_{uuid.uuid4().hex}", timestamp=int(time.time()), body=body
        )
        response = client.generic(
            "POST",
            f"/hooks/v1/agents/{planner.pk}/events",
            body,
            content_type="application/json",
            headers=headers,
        )
        if response.status_code != 202:
            raise RuntimeError(f"{type} answered {response.status_code}: {response.content!r}")
        return response.json()

    # Each escalated planning task has a coding task waiting on it, as in the seed.
    cases = WARMUP + args.answers
    tasks: list[dict[str, Any]] = []
    for i in range(cases):
        tasks.append({"key": f"plan-{i}", "agent": "planner", "title": f"Plan case {i}"})
        tasks.append({"key": f"code-{i}", "agent": "coder", "prerequisites": [f"plan-{i}"]})
    began = time.perf_counter()
    post("run.started", {"run": "desk", "tasks": tasks})
    escalations = []
    for i in range(cases):
        attempt = {"prompt_hash": "p1", "context_hash": "c1"}
        post("task.started", {"run": "desk", "task": f"plan-{i}", "attempt": attempt})
        opened = post(
            "packet.submitted",
            {"run": "desk", "task": f"plan-{i}", "packet": packet(f"plan-{i}", i)},
        )
        escalations.append(opened["escalation"])
    quiesce()
    # A deployment's autovacuum would have analysed the tables the intake just filled; this
    # machine's PostgreSQL may run without it (it does on the CI machines), so the bench does.
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    print(
        f"opened {cases} escalations through the intake ({len(tasks)} tasks, "
        f"{receiver.received} deliveries received) in {time.perf_counter() - began:.1f} s",
        flush=True,
    )

    def round_trip() -> float:
        key = uuid.uuid4().hex
        began = time.perf_counter()
        ping.delay(PORT, key)
        at = receiver.wait(("ping", key))
        if at is None:
            raise RuntimeError("the no-op task did not reach the receiver in 30 s")
        return at - began

    from fleet.wsgi import settle

    settle()  # as the web process does once it has loaded the app
    profiler = None
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0002)
    pings: list[float] = []
    answers: list[float] = []
    calls: list[float] = []
    measured: list[str] = []
    sql: list[str] = []
    for i, escalation_id in enumerate(escalations):
        round_trip_s = round_trip()
        # As the view: the escalation it found, then the service, outside any transaction.
        escalation = Escalation.objects.select_related("run", "task", "packet").get(
            pk=escalation_id
        )
        text = f"Use the loyalty_points threshold in pricing-config.yaml (case {i})"
        # The first (warm-up) answer also notes what the service sends to the database.
        with statements() if i == 0 else nullcontext(sql) as seen:
            if profiler is not None and i >= WARMUP:
                profiler.start()
            began = time.perf_counter()
            desk.escalation_answer(escalation=escalation, reviewer=reviewer, text=text)
            returned = time.perf_counter()
            if profiler is not None and i >= WARMUP:
                profiler.stop()
        sql = seen
        at = receiver.wait(("task.reframed", f"plan-{i}"))
        if at is None:
            delivery = Delivery.objects.filter(type="task.reframed").order_by("-id").first()
            raise RuntimeError(
                f"no task.reframed for plan-{i} in 30 s (the last one: "
                f"{delivery and delivery.status}, {delivery and delivery.last_error})"
            )
        if i >= WARMUP:
            measured.append(f"plan-{i}")
            pings.append(round_trip_s)
            answers.append(at - began)
            calls.append(returned - began)
        quiesce(30)  # the answer's other deliveries and its recompute: the next starts idle

    counts = dict.fromkeys(Delivery.Status.values, 0)
    for status in Delivery.objects.values_list("status", flat=True):
        counts[status] += 1
    after_commit = [a - c for a, c in zip(answers, calls, strict=True)]
    ping_p95 = p50_p95(pings)[1]
    print(line("answer -> task.reframed received:", answers))
    own = [s for s in sql if not s.startswith(("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE"))]
    print(line(f"  the answer service ({len(own)} statements):", calls))
    print(f"    ({len(sql)} with BEGIN, COMMIT and savepoints)")
    print(line("  from its return (committed, enqueued):", after_commit))
    posts = [
        ms / 1000
        for ms in DeliveryAttempt.objects.filter(
            delivery__type="task.reframed", delivery__payload__data__task__in=measured
        ).values_list("duration_ms", flat=True)
    ]
    print(line("  the worker's POST itself (its log):", posts))
    print(line("no-op task round trip (anchor):", pings))
    print(f"deliveries: {counts}; with a bad signature at the receiver: {receiver.unsigned}")
    if profiler is not None:
        from pyinstrument.renderers import ConsoleRenderer

        tree = ConsoleRenderer(unicode=False, color=False, show_all=False, time="seconds")
        print(f"profile of the {len(calls)} measured answers (the service's call):")
        print("\n".join(f"    {r}" for r in profiler.output(tree).splitlines()[6:60]))
    print(
        f"ratio answer/no-op (p95): {p50_p95(answers)[1] / ping_p95:.2f}  (goal <= 4); "
        f"from the service's return only: {p50_p95(after_commit)[1] / ping_p95:.2f}"
    )


def bulk_queue(size: int) -> Any:
    """`size` open escalations over FLEETS fleets, with their runs, tasks and packets."""
    from django.db import connection
    from django.utils import timezone

    from escalations.models import Escalation, FailurePacket
    from fleet import services
    from fleet.models import Agent, Capability, Fleet
    from runs.models import Run, Task

    rng = random.Random(7)
    now = timezone.now()
    began = time.perf_counter()
    fleets = Fleet.objects.bulk_create([Fleet(name=f"queue-{n}") for n in range(FLEETS)])
    reviewer = None
    for fleet in fleets:
        reviewer, _ = services.member_add(username="queue-reviewer", fleet=fleet, role="reviewer")
    agents = {
        (a.fleet_id, a.name): a
        for a in Agent.objects.bulk_create(
            [Agent(fleet=f, name=name, role=name) for f in fleets for name in AGENTS]
        )
    }
    Capability.objects.bulk_create(
        [
            Capability(fleet=f, name=name, status=Capability.Status.UP)  # reported up
            for f in fleets
            for name in ("forge", "db", "ci")
        ]
    )
    per_fleet = size // FLEETS
    runs = Run.objects.bulk_create(
        [
            Run(fleet=f, key=f"run-{r}", title=f"Run {r}", started_by=agents[(f.pk, "planner")],
                started_at=now - timedelta(days=30))
            for f in fleets
            for r in range(-(-per_fleet // TASKS_PER_RUN))
        ],
        batch_size=5000,
    )  # fmt: skip
    by_fleet: dict[int, list[Run]] = {}
    for run in runs:
        by_fleet.setdefault(run.fleet_id, []).append(run)
    # Escalation i is fleet i % FLEETS's: the fleets' timelines interleave, as they would.
    start = now - timedelta(days=30)
    order = []
    for i in range(per_fleet * FLEETS):
        fleet = fleets[i % FLEETS]
        j = i // FLEETS
        order.append((i, fleet, by_fleet[fleet.pk][j // TASKS_PER_RUN], j))
    tasks = Task.objects.bulk_create(
        [
            Task(run=run, key=f"t{j % TASKS_PER_RUN}", title=f"Resolve the discount rule, case {i}",
                 agent=agents[(fleet.pk, AGENTS[j % len(AGENTS)])], position=j % TASKS_PER_RUN,
                 capabilities=CAPABILITIES[j % len(CAPABILITIES)], state=Task.State.ESCALATED,
                 created_at=start, started_at=start)
            for i, fleet, run, j in order
        ],
        batch_size=5000,
    )  # fmt: skip
    packets = FailurePacket.objects.bulk_create(
        [
            FailurePacket(task=task, agent_id=task.agent_id, content=packet(task.key, i),
                          smallest_unblocking_question=f"Where does a customer's tier come from (case {i})?",
                          submitted_at=start + timedelta(seconds=25 * i))
            for (i, _, _, _), task in zip(order, tasks, strict=True)
        ],
        batch_size=5000,
    )  # fmt: skip
    Escalation.objects.bulk_create(
        [
            Escalation(fleet=fleet, run=run, task=task, packet=pkt,
                       reason="the agent stopped and handed over a failure packet",
                       attempt_number=1,
                       opened_at=start + timedelta(seconds=25 * i + rng.randint(0, 20)),
                       # One in 25 is being looked at by the reviewer.
                       status="claimed" if i % 25 == 0 else "open",
                       claimed_by=reviewer if i % 25 == 0 else None,
                       claim_expires_at=now + timedelta(hours=2) if i % 25 == 0 else None)
            for (i, fleet, run, _), task, pkt in zip(order, tasks, packets, strict=True)
        ],
        batch_size=5000,
    )  # fmt: skip
    with connection.cursor() as cursor:
        for table in ("escalations_escalation", "escalations_failurepacket", "runs_task", "runs_run",
                      "fleet_agent", "fleet_fleet", "fleet_membership", "fleet_capability"):  # fmt: skip
            cursor.execute(f"VACUUM ANALYZE {table}")
    print(
        f"stored {len(order)} open escalations over {FLEETS} fleets in "
        f"{time.perf_counter() - began:.1f} s",
        flush=True,
    )
    return reviewer


@contextmanager
def statements() -> Iterator[list[str]]:
    """The SQL the block sends, as sent (Django binds client-side: the literal statements)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    captured: list[str] = []
    with CaptureQueriesContext(connection) as context:
        yield captured
    captured.extend(q["sql"] for q in context.captured_queries)


def queue_page(args: argparse.Namespace) -> None:
    import psycopg
    from django.test import Client

    from fleet.wsgi import settle

    reviewer = bulk_queue(args.escalations)
    settle()  # as the web process does once it has loaded the app
    client = Client()
    client.force_login(reviewer)
    url = "/escalations/?" + "&".join(f"{k}={v}" for k, v in FILTER.items())

    def render() -> Any:
        response = client.get(url)
        if response.status_code != 200:
            raise RuntimeError(f"{url} answered {response.status_code}")
        return response

    with statements() as sql:
        page = render().content.decode()
    rows = page.count('class="row ')
    if rows != 50:
        raise RuntimeError(f"the page shows {rows} rows, not 50")
    if not all(s.lstrip().upper().startswith("SELECT") for s in sql):
        raise RuntimeError(
            f"the page wrote: {[s for s in sql if not s.upper().startswith('SELECT')]}"
        )

    # As Django sends them: never prepared (psycopg prepares a statement it has run five times,
    # and a prepared one skips the planner, which Django's page pays on every request).
    with psycopg.connect(f"{PG}/{DB}", autocommit=True, prepare_threshold=None) as conn:

        def replay(each: list[float] | None = None) -> None:
            for n, statement in enumerate(sql):
                began = time.perf_counter()
                conn.execute(statement.encode()).fetchall()
                if each is not None:
                    each[n] += time.perf_counter() - began

        for _ in range(10):
            render()
            replay()
        pages: list[float] = []
        raw: list[float] = []
        per_statement = [0.0] * len(sql)
        for _ in range(args.pages):
            began = time.perf_counter()
            render()
            pages.append(time.perf_counter() - began)
            began = time.perf_counter()
            replay(per_statement)
            raw.append(time.perf_counter() - began)

        slowest = sql[per_statement.index(max(per_statement))]
        plan = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {slowest}".encode()).fetchone()[0][0]

    ratio = p50_p95(pages)[1] / p50_p95(raw)[1]
    print(line(f"queue page {url}:", pages))
    print(line(f"its {len(sql)} statements through psycopg:", raw))
    for n, statement in enumerate(sql):
        mean = per_statement[n] / args.pages * 1000
        print(f"    {mean:6.2f} ms  {' '.join(statement.split())[:110]}")
    sorts = ", ".join(f"{rows:,} rows ({how})" for rows, how in sorted_rows(plan["Plan"]))
    print(
        f"    the slowest one's plan: planning {plan['Planning Time']:.1f} ms, execution "
        f"{plan['Execution Time']:.1f} ms, sorting {sorts or 'nothing'} "
        f"for {plan['Plan']['Actual Rows']} rows"
    )
    print(f"ratio page/SQL (p95): {ratio:.2f}  (goal <= 3)")
    if args.profile or ratio > 3:
        profile(render)


def sorted_rows(node: dict[str, Any]) -> Iterator[tuple[int, str]]:
    """The rows each Sort of an EXPLAIN (ANALYZE, FORMAT JSON) plan took in, and its method."""
    if node["Node Type"] == "Sort":
        child = node["Plans"][0]
        yield child["Actual Rows"] * child["Actual Loops"], node.get("Sort Method", "")
    for below in node.get("Plans", ()):
        yield from sorted_rows(below)


def profile(render: Callable[[], Any], times: int = 30, top: int = 30) -> None:
    """Where the page's time goes: the functions with the most time of their own."""
    from pyinstrument import Profiler
    from pyinstrument.renderers import ConsoleRenderer

    profiler = Profiler(interval=0.0005)
    profiler.start()
    for _ in range(times):
        render()
    profiler.stop()
    flat = ConsoleRenderer(unicode=False, color=False, flat=True, time="percent_of_total")
    rows = [r for r in profiler.output(flat).splitlines() if r[:1].isdigit()]
    print(f"profile of {times} renders of the page, self time, top {top}:")
    print("\n".join(f"    {r}" for r in rows[:top]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--answers", type=int, default=200)
    parser.add_argument("--escalations", type=int, default=100_000)
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument(
        "--concurrency", type=int, default=0, help="worker processes (0: Celery's default)"
    )
    parser.add_argument("--profile", action="store_true")
    args, _ = parser.parse_known_args()  # `make bench` hands every bench the same arguments

    # A terminated bench cleans up like a failed one.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    import redis

    broker = redis.Redis.from_url(BROKER)
    broker.flushdb()
    redis.Redis.from_url(CACHE).flushdb()
    sh("dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", "--force", DB)
    sh("createdb", "-h", "127.0.0.1", "-U", "postgres", DB)
    os.environ.update(
        {
            "DATABASE_URL": f"{PG}/{DB}",
            "DJANGO_SETTINGS_MODULE": "fleet.settings",
            "CELERY_BROKER_URL": BROKER,
            "CACHE_URL": CACHE,
            "CELERY_TASK_ALWAYS_EAGER": "0",
            "LOG_LEVEL": "WARNING",
        }
    )
    worker = None
    receiver = None
    log_dir = tempfile.TemporaryDirectory(prefix="bench-desk-")
    worker_log = Path(log_dir.name) / "worker.log"
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        receiver = Receiver(PORT)
        worker = start_worker(worker_log, args.concurrency)
        answer_to_reframed(args, receiver)
        stop_worker(worker)
        queue_page(args)
    except BaseException:
        if worker_log.exists():
            tail = worker_log.read_text(errors="replace").splitlines()[-30:]
            print("worker log (last lines):\n" + "\n".join(tail), file=sys.stderr)
        raise
    finally:
        if worker is not None:
            stop_worker(worker)
        if receiver is not None:
            receiver.close()
        from django.db import connections

        connections.close_all()
        sh("dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", "--force", DB, check=False)
        broker.flushdb()
        log_dir.cleanup()


if __name__ == "__main__":
    main()
