"""bench/scale: Bulkhead scaled out on one PostgreSQL, and a large database's pages.

(a) Web processes and workers. For each of 1, 2 and 4 gunicorn processes with 1 and 2 Celery
worker processes, 8 agents' threads post signed events for their own tasks, over `--scale-runs`
runs of `--tasks` tasks (task.started, claim.posted, task.finished: three events a task) for
`--seconds`; then the workers drain what
the events left them (each run's frontier recomputed, until no change is pending). Prints the
events/s the web side applied, the events/s of the whole (applied and drained), and each against
pgbench inserting one row a transaction at the same concurrency into the same database (the
anchor, measured once, in the same run). A last row sends the same events in batches of 100.
(b) A large database: `--runs` runs of `--tasks-per-run` tasks (1,000 x 1,000 by default: a
million tasks, with their prerequisites and stored blockers) written with bulk SQL in seconds,
and 100,000 open escalations; on it, the run page, the frontier API and the escalation queue,
each rendered in-process against its own SQL replayed through psycopg (the ratio of the p95s),
and a reviewer's answer against the same answers given before the large runs were stored.

Run: `make bench` (or `.venv/bin/python bench/scale.py [--seconds 8] [--runs 1000]
[--tasks-per-run 1000] [--escalations 100000] [--pages 50] [--skip-scale] [--skip-large]`); a
smoke run: `--seconds 3 --runs 20 --tasks-per-run 100 --escalations 2000 --pages 10`. It uses the
databases bulkhead_bench_scale and bulkhead_bench_large (BENCH_DB_SUFFIX appended; dropped when
it ends), the broker BENCH_SCALE_BROKER (Redis db 11, flushed), the cache BENCH_SCALE_CACHE (Redis db
9, flushed) and the ports from BENCH_PORT
(8790).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

PG = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
SUFFIX = os.environ.get("BENCH_DB_SUFFIX", "")
DB = "bulkhead_bench_scale" + SUFFIX
LARGE = "bulkhead_bench_large" + SUFFIX
BROKER = os.environ.get("BENCH_SCALE_BROKER", "redis://127.0.0.1:6379/11")
CACHE = os.environ.get("BENCH_SCALE_CACHE", "redis://127.0.0.1:6379/9")  # as in production
PORT = int(os.environ.get("BENCH_PORT", "8790"))
CONCURRENCY = 8
HASHES = {"prompt_hash": "sha256:" + "a" * 64, "context_hash": "sha256:" + "b" * 64}


def sh(*args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    if check and done.returncode:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def fresh(name: str) -> None:
    sh("dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", "--force", name)
    sh("createdb", "-h", "127.0.0.1", "-U", "postgres", name)


def app_env(database: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": f"{PG}/{database}",
        "DJANGO_SETTINGS_MODULE": "fleet.settings",
        "AGENT_RATE_LIMIT": "100000000",
        "CELERY_BROKER_URL": BROKER,
        "CACHE_URL": CACHE,
        "CELERY_TASK_ALWAYS_EAGER": "0",
        "LOG_LEVEL": "WARNING",
    }


def pgbench_tps(database: str, seconds: int, size: int) -> float:
    sh("psql", "-h", "127.0.0.1", "-U", "postgres", "-d", database, "-qc",
       "CREATE TABLE IF NOT EXISTS bench_rows (id bigserial primary key, webhook_id text unique, body jsonb, at timestamptz default now())")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "insert.sql"
        payload = json.dumps({"p": "x" * max(1, size - 10)})
        script.write_text(
            "INSERT INTO bench_rows (webhook_id, body) VALUES "
            f"(md5(random()::text || clock_timestamp()::text), '{payload}');\n"
        )
        out = sh("pgbench", "-h", "127.0.0.1", "-U", "postgres", "-n", "-f", str(script),
                 "-c", str(CONCURRENCY), "-j", "4", "-T", str(seconds), database)  # fmt: skip
    return float(next(x for x in out.splitlines() if x.startswith("tps")).split("=")[1].split()[0])


class Fleet:
    """The bench's agent, signing as agents do."""

    def __init__(self, env: dict[str, str]) -> None:
        python = sys.executable
        sh(python, str(ROOT / "manage.py"), "fleet_create", "bench", env=env)
        agent = json.loads(
            sh(
                python,
                str(ROOT / "manage.py"),
                "agent_create",
                "bench",
                "a",
                "--orchestrator",
                env=env,
            )  # fmt: skip
        )
        self.id = agent["id"]
        self.secret = agent["signing_secret"]

    def signed(self, body: bytes) -> dict[str, str]:
        from fleet import signing

        headers = signing.sign(
            self.secret, msg_id=f"msg_{uuid.uuid4().hex}", timestamp=int(time.time()), body=body
        )
        headers["content-type"] = "application/json"
        return headers


def envelope(type: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"type": type, "timestamp": "2026-12-02T10:00:00Z", "data": data}


def task_events(run: str, key: str) -> list[dict[str, Any]]:
    claim = {"key": f"{key}-c", "statement": "customers has `customer_tier`", "load_bearing": False}
    return [
        envelope("task.started", {"run": run, "task": key, "attempt": HASHES}),
        envelope("claim.posted", {"run": run, "task": key, "claim": claim}),
        envelope("task.finished", {"run": run, "task": key, "outcome": "succeeded"}),
    ]


def start_web(env: dict[str, str], processes: int, port: int) -> subprocess.Popen[bytes]:
    import httpx

    web = subprocess.Popen(
        [str(Path(sys.executable).parent / "gunicorn"), "fleet.wsgi", "--bind",
         f"127.0.0.1:{port}", "--workers", str(processes), "--log-level", "warning"],
        cwd=ROOT, env=env, start_new_session=True,
    )  # fmt: skip
    for _ in range(200):
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz")
            return web
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit("gunicorn did not start")


def start_worker(env: dict[str, str], processes: int, log: Path) -> subprocess.Popen[bytes]:
    command = [str(Path(sys.executable).parent / "celery"), "-A", "fleet", "worker",
               "--concurrency", str(processes), "--loglevel", "WARNING", "--without-mingle",
               "--without-gossip", "-n", f"bench-scale-{os.getpid()}@%h"]  # fmt: skip
    with log.open("ab") as out:
        return subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def pending_changes(database: str) -> int:
    import psycopg

    with psycopg.connect(f"{PG}/{database}", autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM runs_frontierchange").fetchone()
    return int(row[0]) if row else 0


def load(
    fleet: Fleet, port: int, keys: list[tuple[str, str]], seconds: float, batch: int
) -> tuple[int, int, float]:
    """Post the tasks' events from CONCURRENCY threads, each over its own kept-alive connection
    (bench/ingest.py's); (applied, refused, elapsed)."""
    from ingest import Connection

    counts = [0, 0]
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    base = f"/hooks/v1/agents/{fleet.id}"

    def agent(worker: int) -> None:
        applied = refused = 0
        mine = keys[worker::CONCURRENCY]
        client = Connection(port, timeout=60)
        try:
            for run, key in mine:
                if time.monotonic() >= stop_at:
                    break
                events = task_events(run, key)
                if batch:
                    # The start alone (it gates), the rest batched with the next tasks' ones.
                    body = json.dumps(events[0]).encode()
                    status, _ = client.post(f"{base}/events", body, fleet.signed(body))
                    applied += status == 202
                    pending.setdefault(worker, []).extend(events[1:])
                    if len(pending[worker]) < batch:
                        continue
                    items = [{"id": uuid.uuid4().hex, **e} for e in pending.pop(worker)]
                    body = json.dumps({"events": items}).encode()
                    status, reply = client.post(f"{base}/batches", body, fleet.signed(body))
                    results = json.loads(reply)["results"] if status == 200 else []
                    applied += sum(r["status"] == 202 for r in results)
                    refused += len(items) - sum(r["status"] == 202 for r in results)
                    continue
                for event in events:
                    body = json.dumps(event).encode()
                    status, _ = client.post(f"{base}/events", body, fleet.signed(body))
                    if status == 202:
                        applied += 1
                    else:
                        refused += 1
        finally:
            client.close()
        with lock:
            counts[0] += applied
            counts[1] += refused

    pending: dict[int, list[dict[str, Any]]] = {}
    began = time.monotonic()
    threads = [threading.Thread(target=agent, args=(n,)) for n in range(CONCURRENCY)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return counts[0], counts[1], time.monotonic() - began


def declare(fleet: Fleet, port: int, prefix: str, runs: int, tasks: int) -> list[tuple[str, str]]:
    """`runs` runs of `tasks` tasks each; their (run, task) keys, interleaved over the runs: a
    fleet's agents work on many runs at once."""
    import httpx

    url = f"http://127.0.0.1:{port}/hooks/v1/agents/{fleet.id}/events"
    keys = [f"t{i}" for i in range(tasks)]
    for r in range(runs):
        data = {"run": f"{prefix}-{r}", "tasks": [{"key": k, "agent": "a"} for k in keys]}
        body = json.dumps(envelope("run.started", data)).encode()
        httpx.post(url, content=body, headers=fleet.signed(body), timeout=600).raise_for_status()
    return [(f"{prefix}-{r}", k) for k in keys for r in range(runs)]


def scale_out(args: argparse.Namespace, log: Path) -> None:
    import redis

    redis.Redis.from_url(BROKER).flushdb()
    redis.Redis.from_url(CACHE).flushdb()
    fresh(DB)
    env = app_env(DB)
    sh(sys.executable, str(ROOT / "manage.py"), "migrate", "-v0", env=env)
    fleet = Fleet(env)
    sample = len(json.dumps(task_events("run-x", "t0")[1]))
    tps = pgbench_tps(DB, int(args.seconds), sample)
    print(f"anchor: pgbench {tps:,.0f} single-row inserts/s at concurrency {CONCURRENCY}")
    print(f"{'web':>4} {'workers':>8} {'applied/s':>10} {'ratio':>6} {'with drain/s':>13}  notes")
    cells = [(w, k, 0) for k in (1, 2) for w in (1, 2, 4)] + [(4, 2, 100)]
    for n, (web_processes, worker_processes, batch) in enumerate(cells):
        port = PORT + n
        web = start_web(env, web_processes, port)
        worker = start_worker(env, worker_processes, log)
        try:
            keys = declare(fleet, port, f"scale-{n}", args.scale_runs, args.tasks)
            while pending_changes(DB):  # the declarations' own recomputes
                time.sleep(0.2)
            applied, refused, elapsed = load(fleet, port, keys, args.seconds, batch)
            drain_began = time.monotonic()
            while pending_changes(DB) and time.monotonic() - drain_began < 120:
                time.sleep(0.2)
            left = pending_changes(DB)
            whole = time.monotonic() - drain_began + elapsed
        finally:
            stop(web)
            stop(worker)
        rate = applied / elapsed
        note = f"{refused} refused" if refused else ""
        note += f"; {left} changes left undrained" if left else ""
        note += f"; batches of {batch}" if batch else ""
        print(
            f"{web_processes:>4} {worker_processes:>8} {rate:>10,.1f} {rate / tps:>6.3f} "
            f"{applied / whole:>13,.1f}  {note}",
            flush=True,
        )


def large_database(args: argparse.Namespace) -> None:
    """A million tasks in a thousand runs, written in bulk, and three pages against their SQL."""
    reuse = args.reuse_large and LARGE in sh("psql", "-h", "127.0.0.1", "-U", "postgres", "-Atc",
                                             "SELECT datname FROM pg_database")  # fmt: skip
    if not reuse:
        fresh(LARGE)
    os.environ.update(app_env(LARGE))
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from fleet.models import Agent, Fleet
    from runs import scheduler
    from runs.models import Run

    if reuse:  # a database an earlier `--keep-large` left: measure its pages again
        print(f"reusing {LARGE}", flush=True)
        reviewer = get_user_model().objects.get(username="queue-reviewer")
        agent = Agent.objects.get(fleet__name="queue-0", name="planner")
        measure_pages(args, reviewer, agent, Run.objects.filter(key__startswith="large-").count())
        return
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    from desk import bulk_queue

    began = time.perf_counter()
    reviewer = bulk_queue(args.escalations)
    # The anchor of the answer's row: the same answers, the large runs not yet stored.
    before = answers(reviewer, args.pages)

    fleet = Fleet.objects.get(name="queue-0")
    agent = Agent.objects.get(fleet=fleet, name="planner")
    per, runs = args.tasks_per_run, args.runs
    with connection.cursor() as cursor:
        # Runs, then their tasks (10 lanes; the first 30% succeeded), each task after the one
        # ten before it; then the stored blockers of the pending ones: generated by PostgreSQL.
        cursor.execute(
            """INSERT INTO runs_run (key, title, policy, state, cause, started_at, imported,
                   fleet_id, started_by_id, declaration)
               SELECT 'large-' || g, 'Large run ' || g, 'scoped', 'running', '', now(), false,
                   %s, %s, '' FROM generate_series(1, %s) g""",
            [fleet.pk, agent.pk, runs],
        )
        cursor.execute(
            """INSERT INTO runs_task (key, title, position, capabilities, reads_state_of, effect,
                   dependency_confidence, transaction, weight, consumes, state, ready, released,
                   created_at, agent_id, run_id, checks, consumes_declared, refresh)
               SELECT 't' || i, 'Task ' || i, i, '[]', '[]', 'none', 'declared', '', 1, '[]',
                   CASE WHEN i < %s THEN 'succeeded' ELSE 'pending' END,
                   i >= %s AND i < %s, false, now(), %s, r.id, '[]', false, '[]'
               FROM runs_run r, generate_series(0, %s - 1) i WHERE r.key LIKE 'large-%%'""",
            [per * 3 // 10, per * 3 // 10, per * 3 // 10 + 10, agent.pk, per],
        )
        cursor.execute(
            """INSERT INTO runs_prerequisite (task_id, requires_id)
               SELECT t.id, u.id FROM runs_task t JOIN runs_run r ON r.id = t.run_id
               JOIN runs_task u ON u.run_id = t.run_id AND u.position = t.position - 10
               WHERE r.key LIKE 'large-%%'"""
        )
        cursor.execute(
            """INSERT INTO runs_blocker (task_id, code, set_at)
               SELECT t.id, 'prerequisite:' || u.key, now() FROM runs_task t
               JOIN runs_prerequisite p ON p.task_id = t.id JOIN runs_task u ON u.id = p.requires_id
               JOIN runs_run r ON r.id = t.run_id
               WHERE r.key LIKE 'large-%%' AND t.state = 'pending' AND u.state <> 'succeeded'"""
        )
        for table in ("runs_run", "runs_task", "runs_prerequisite", "runs_blocker"):
            cursor.execute(f"VACUUM ANALYZE {table}")
        cursor.execute("SELECT count(*) FROM runs_task")
        total = cursor.fetchone()[0]
    print(f"stored {total:,} tasks in {Run.objects.count():,} runs and {args.escalations:,} "
          f"open escalations in {time.perf_counter() - began:.1f} s", flush=True)  # fmt: skip
    scheduler.recompute(Run.objects.get(key=f"large-{runs // 2}").pk)  # the stored frontier
    after = answers(reviewer, args.pages)
    from desk import line, p50_p95

    print(line(f"a reviewer's answer, {total:,} tasks stored:", after))
    print(line("  the same, before the large runs were stored:", before))
    print(f"  ratio answer large/small (p95): {p50_p95(after)[1] / p50_p95(before)[1]:.2f}  "
          "(goal <= 1.5: an answer reads what it names, not the database)")  # fmt: skip
    measure_pages(args, reviewer, agent, runs)  # agrees with the rule


def answers(reviewer: Any, times: int) -> list[float]:
    """`times` open escalations answered, each timed as the view calls the service (outside a
    transaction; what it enqueues after commit waits in the broker, no worker runs)."""
    from escalations import services as desk
    from escalations.models import Escalation

    took = []
    found = Escalation.objects.filter(status=Escalation.Status.OPEN).order_by("id")
    for escalation in found.select_related("run", "task", "packet")[: times + 5]:
        began = time.perf_counter()
        desk.escalation_answer(escalation=escalation, reviewer=reviewer, text="From accounts.tier")
        took.append(time.perf_counter() - began)
    return took[5:]  # the first few warm the connection and the caches


def measure_pages(args: argparse.Namespace, reviewer: Any, agent: Any, runs: int) -> None:
    from fleet.models import ApiToken
    from runs.models import Run

    middle = Run.objects.get(key=f"large-{runs // 2}")
    _, token = ApiToken.issue(agent)
    pages = [
        ("run page", f"/runs/{middle.pk}/", {}),
        ("frontier API", f"/api/v1/runs/{middle.key}/frontier", {"HTTP_AUTHORIZATION": f"Bearer {token}"}),
        ("queue page", "/escalations/?agent=coder", {}),
    ]  # fmt: skip
    for name, url, headers in pages:
        if args.only and args.only not in name:
            continue
        against_sql(name, url, headers, reviewer, args.pages, profile=args.profile)


def against_sql(
    name: str, url: str, headers: dict[str, str], user: Any, times: int, *, profile: bool = False
) -> None:
    import psycopg
    from desk import line, p50_p95, statements
    from django.test import Client

    from fleet.wsgi import settle

    settle()  # as the web process does once it has loaded the app
    client = Client()
    client.force_login(user)

    def render() -> None:
        response = client.get(url, **headers)
        if response.status_code != 200:
            raise SystemExit(f"{url} answered {response.status_code}")

    with statements() as sql:
        render()
    sql = [s for s in sql if s.lstrip().upper().startswith("SELECT")]  # the session's touch
    # As Django sends them: never prepared (psycopg prepares a statement it has run five times,
    # and a prepared one skips the planner, which Django's page pays on every request).
    with psycopg.connect(f"{PG}/{LARGE}", autocommit=True, prepare_threshold=None) as conn:

        def replay() -> None:
            for statement in sql:
                conn.execute(statement.encode()).fetchall()

        for _ in range(5):
            render()
            replay()
        rendered, raw = [], []
        for _ in range(times):
            began = time.perf_counter()
            render()
            rendered.append(time.perf_counter() - began)
            began = time.perf_counter()
            replay()
            raw.append(time.perf_counter() - began)
        if profile:  # where a render's time goes, and each statement's share of the SQL
            shares = []
            for statement in sql:
                began = time.perf_counter()
                conn.execute(statement.encode()).fetchall()
                shares.append((time.perf_counter() - began, statement))
    print(line(f"{name} {url}:", rendered))
    print(line(f"  its {len(sql)} statements through psycopg:", raw))
    print(f"  ratio {name}/SQL (p95): {p50_p95(rendered)[1] / p50_p95(raw)[1]:.2f}  (goal <= 3)")
    if profile:
        for took, statement in sorted(shares, key=lambda share: -share[0])[:8]:
            print(f"    {took * 1000:7.2f} ms  {' '.join(statement.split())[:150]}")
        from pyinstrument import Profiler

        with Profiler(interval=0.0005) as profiler:
            for _ in range(5):
                render()
        print(profiler.output_text(unicode=False, color=False, show_all=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--scale-runs", type=int, default=50, help="runs of each scale-out cell")
    parser.add_argument("--tasks", type=int, default=200, help="tasks of each scale-out run")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--tasks-per-run", type=int, default=1000)
    parser.add_argument("--escalations", type=int, default=100_000)
    parser.add_argument("--pages", type=int, default=50)
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--profile", action="store_true", help="(b): profile each page's render")
    parser.add_argument("--only", default="", help="(b): only the pages whose name has this")
    parser.add_argument("--keep-large", action="store_true", help="(b): keep its database")
    parser.add_argument("--reuse-large", action="store_true", help="(b): measure a kept one")
    args, _ = parser.parse_known_args()  # `make bench` hands every bench the same arguments
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores", flush=True)
    log = Path(tempfile.mkdtemp(prefix="bench-scale-")) / "worker.log"
    try:
        if not args.skip_scale:
            scale_out(args, log)
        if not args.skip_large:
            large_database(args)
    except BaseException:
        if log.exists():
            tail = log.read_text(errors="replace").splitlines()[-20:]
            print("worker log (last lines):\n" + "\n".join(tail), file=sys.stderr)
        raise
    finally:
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # noqa: S110 - Django may never have been set up
            pass
        for name in (DB,) if args.keep_large else (DB, LARGE):
            sh("dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", "--force", name,
               check=False)  # fmt: skip
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
