"""bench/ingest: signed events posted to the app under gunicorn on PostgreSQL, against pgbench.

Prints events/s, p50 and p99 for the app, the same for pgbench inserting an equivalent row (same
payload size, one transaction each) at the same concurrency into the same database, and the ratio;
then the same threads sending claim.posted events in batches of `--batch` (100) to the batches
endpoint, with their events/s against the same anchor.
The app runs as in production: gunicorn with `--workers` (2) processes of `--threads` (4) threads.
Each load thread keeps one HTTP/1.1 connection open, as an agent's client does, and posts with
the standard library's `http.client`: httpx cost the machine as much CPU per request as the
server did, and the load shares the machine's cores with the app and PostgreSQL.
Run: `make bench` or `.venv/bin/python bench/ingest.py [--seconds 10] [--concurrency 8]`. The
database is bulkhead_bench (BENCH_DB_SUFFIX appended), the port BENCH_PORT (8765), the cache
Redis db 10 (flushed; BENCH_CACHE).
"""

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PG = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
DB = "bulkhead_bench" + os.environ.get("BENCH_DB_SUFFIX", "")
PORT = int(os.environ.get("BENCH_PORT", "8765"))
CACHE = os.environ.get("BENCH_CACHE", "redis://127.0.0.1:6379/10")


def sh(*args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    if check and done.returncode:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


TASKS = 20_000


class Connection:
    """One kept-alive HTTP/1.1 connection to the app, opened again when the server closes it."""

    def __init__(self, port: int, timeout: float = 120) -> None:
        self.port, self.timeout = port, timeout
        self.http = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        for again in (False, True):
            try:
                self.http.request("POST", path, body=body, headers=headers)
                response = self.http.getresponse()
                content = response.read()
            except (ConnectionError, http.client.HTTPException):
                self.http.close()
                self.http = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
                if again:
                    raise
                continue
            if response.will_close:
                self.http.close()
            return response.status, content
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.http.close()


def packet(i: int, task: str = "t0") -> dict:
    return {
        "task": task,
        "tried": [
            f"attempt {n}: re-ran the migration with a narrower scope and checked the schema"
            for n in range(8)
        ],
        "ruled_out": [
            {
                "hypothesis": f"hypothesis {n}: the column was renamed upstream",
                "how": "queried information_schema",
            }
            for n in range(6)
        ],
        "evidence": [
            {
                "kind": "query_result",
                "source": "SELECT column_name FROM information_schema.columns WHERE table_name = 'customers'",
                "payload_hash": "sha256:" + "ab" * 32,
                "datasource": "orders",
            }
        ],
        "smallest_unblocking_question": f"Which field should decide the discount tier for {task} (case {i})?",
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--batch", type=int, default=100)
    args, _ = parser.parse_known_args()  # `make bench` hands every bench the same arguments

    sh("dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", DB)
    sh("createdb", "-h", "127.0.0.1", "-U", "postgres", DB)
    import redis

    redis.Redis.from_url(CACHE).flushdb()
    env = {
        **os.environ,
        "DATABASE_URL": f"{PG}/{DB}",
        "DJANGO_SETTINGS_MODULE": "fleet.settings",
        "AGENT_RATE_LIMIT": "100000000",
        "CELERY_BROKER_URL": os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/13"),
        "CACHE_URL": CACHE,  # the agents' keys and rate counts, as in production
        "LOG_LEVEL": "ERROR",  # not a line per refused request
    }
    python = sys.executable
    sh(python, str(ROOT / "manage.py"), "migrate", "-v0", env=env)
    sh(python, str(ROOT / "manage.py"), "fleet_create", "bench", env=env)
    agent = json.loads(
        sh(python, str(ROOT / "manage.py"), "agent_create", "bench", "a", "--orchestrator", env=env)
    )
    web = subprocess.Popen(
        [str(Path(python).parent / "gunicorn"), "fleet.wsgi", "--bind", f"127.0.0.1:{PORT}",
         "--workers", str(args.workers), "--threads", str(args.threads), "--log-level", "warning"],
        cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        import httpx

        from fleet import signing

        path = f"/hooks/v1/agents/{agent['id']}/events"
        url = f"http://127.0.0.1:{PORT}{path}"
        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{PORT}/healthz")
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        secret = agent["signing_secret"]

        def signed(type: str, data: dict) -> tuple[bytes, dict[str, str]]:
            body = json.dumps(
                {"type": type, "timestamp": "2026-12-02T10:00:00Z", "data": data}
            ).encode()
            headers = signing.sign(
                secret, msg_id=f"msg_{uuid.uuid4().hex}", timestamp=int(time.time()), body=body
            )
            headers["content-type"] = "application/json"
            return body, headers

        # One task per packet, as in a real fleet: a packet is how one task stops. Each thread
        # has its own tasks, and each packet its own question (the same question from two tasks
        # would join one escalation: a different measure).
        tasks = [{"key": f"t{i}", "agent": "a"} for i in range(TASKS)]
        started = signed("run.started", {"run": "r", "tasks": tasks})
        httpx.post(url, content=started[0], headers=started[1], timeout=600).raise_for_status()
        sample = signed("packet.submitted", {"run": "r", "task": "t0", "packet": packet(0)})[0]
        latencies: list[float] = []
        errors = [0]
        refusals: list[str] = []  # the first few answers that were not 202, to say why
        lock = threading.Lock()
        stop = time.monotonic() + args.seconds

        share = TASKS // args.concurrency

        def load(worker: int) -> None:
            n = 0
            local: list[float] = []
            client = Connection(PORT)
            while time.monotonic() < stop:
                n += 1
                own = f"t{worker * share + n % share}"
                if n % 2:
                    body, headers = signed(
                        "packet.submitted",
                        {"run": "r", "task": own, "packet": packet(n, own)},
                    )
                else:
                    claim = {
                        "key": f"c-{worker}-{n}",
                        "statement": "customers has customer_tier " * 20,
                    }
                    body, headers = signed(
                        "claim.posted", {"run": "r", "task": own, "claim": claim}
                    )
                began = time.perf_counter()
                status, content = client.post(path, body, headers)
                local.append(time.perf_counter() - began)
                if status != 202:
                    with lock:
                        errors[0] += 1
                        if len(refusals) < 3:
                            refusals.append(f"{status} {content[:300].decode()}")
            client.close()
            with lock:
                latencies.extend(local)

        began = time.monotonic()
        threads = [threading.Thread(target=load, args=(i,)) for i in range(args.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - began

        batches_path = path.replace("/events", "/batches")
        batched = [0, 0]  # events applied, batches sent
        batch_latencies: list[float] = []
        stop = time.monotonic() + args.seconds

        def load_batches(worker: int) -> None:
            n = 0
            client = Connection(PORT)
            while time.monotonic() < stop:
                items = []
                for _ in range(args.batch):
                    n += 1
                    own = f"t{worker * share + n % share}"
                    claim = {
                        "key": f"b-{worker}-{n}",
                        "statement": "customers has customer_tier " * 20,
                    }
                    items.append({"id": uuid.uuid4().hex, "type": "claim.posted",
                                  "timestamp": "2026-12-02T10:00:00Z",
                                  "data": {"run": "r", "task": own, "claim": claim}})  # fmt: skip
                body = json.dumps({"events": items}).encode()
                headers = signing.sign(secret, msg_id=f"msg_{uuid.uuid4().hex}",
                                       timestamp=int(time.time()), body=body)  # fmt: skip
                headers["content-type"] = "application/json"
                sent = time.perf_counter()
                status, content = client.post(batches_path, body, headers)
                took = time.perf_counter() - sent
                ok = status == 200 and all(
                    r["status"] == 202 for r in json.loads(content)["results"]
                )
                with lock:
                    batched[0] += len(items) if ok else 0
                    batched[1] += 1
                    batch_latencies.append(took)
            client.close()

        batch_began = time.monotonic()
        threads = [
            threading.Thread(target=load_batches, args=(i,)) for i in range(args.concurrency)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        batch_elapsed = time.monotonic() - batch_began

        # The floor: the same threads posting a body signed with another secret, which the app
        # refuses (401) after reading the agent's keys and checking the signature, and nothing
        # more. No event can be applied faster than this on this machine and server.
        refused = [0]
        stop = time.monotonic() + args.seconds / 2
        wrong = "whsec_" + "B" * 32
        claim_body = json.dumps({"type": "claim.posted", "timestamp": "2026-12-02T10:00:00Z",
                                 "data": {"run": "r", "task": "t0", "claim": {"key": "f", "statement": "x"}}}).encode()  # fmt: skip

        def load_refused() -> None:
            client = Connection(PORT)
            while time.monotonic() < stop:
                headers = signing.sign(wrong, msg_id=f"msg_{uuid.uuid4().hex}",
                                       timestamp=int(time.time()), body=claim_body)  # fmt: skip
                headers["content-type"] = "application/json"
                if client.post(path, claim_body, headers)[0] == 401:
                    with lock:
                        refused[0] += 1
            client.close()

        floor_began = time.monotonic()
        threads = [threading.Thread(target=load_refused) for _ in range(args.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        floor_elapsed = time.monotonic() - floor_began
    finally:
        web.terminate()
        web.wait()

    app_rate = len(latencies) / elapsed
    p50 = statistics.median(latencies) * 1000
    p99 = statistics.quantiles(latencies, n=100)[98] * 1000

    size = len(sample)
    with tempfile.TemporaryDirectory() as tmp:
        sh("psql", "-h", "127.0.0.1", "-U", "postgres", "-d", DB, "-qc",
           "CREATE TABLE bench_rows (id bigserial primary key, webhook_id text unique, body jsonb, at timestamptz default now())")  # fmt: skip
        script = Path(tmp) / "insert.sql"
        payload = json.dumps({"p": "x" * (size - 10)})
        script.write_text(
            f"INSERT INTO bench_rows (webhook_id, body) VALUES (md5(random()::text || clock_timestamp()::text), '{payload}');\n"
        )
        out = sh("pgbench", "-h", "127.0.0.1", "-U", "postgres", "-n", "-f", str(script), "-c", str(args.concurrency),
                 "-j", str(min(args.concurrency, 4)), "-T", str(int(args.seconds)), "-r", DB)  # fmt: skip
    tps = float(
        next(line for line in out.splitlines() if line.startswith("tps")).split("=")[1].split()[0]
    )
    latency = next((line for line in out.splitlines() if "latency average" in line), "")
    print(
        f"app:     {app_rate:8.1f} events/s  p50 {p50:6.1f} ms  p99 {p99:6.1f} ms  ({len(latencies)} events, {errors[0]} not 202)"
    )
    print(
        f"pgbench: {tps:8.1f} inserts/s {latency.strip()}  (rows of {size} bytes, one transaction each)"
    )
    for refusal in refusals:
        print(f"  not 202: {refusal}")
    print(f"ratio app/pgbench: {app_rate / tps:.3f}  (goal >= 0.1)")
    batch_rate = batched[0] / batch_elapsed
    print(
        f"batched: {batch_rate:8.1f} events/s  ({batched[1]} batches of {args.batch} claim.posted, "
        f"p50 {statistics.median(batch_latencies) * 1000:.0f} ms a batch)"
    )
    print(f"ratio batched/pgbench: {batch_rate / tps:.3f}  (goal >= 0.5)")
    floor = refused[0] / floor_elapsed
    print(
        f"floor:   {floor:8.1f} requests/s refused at the signature (401), nothing applied; "
        f"ratio floor/pgbench: {floor / tps:.3f}"
    )
    sh("dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", DB, check=False)
    shutil.rmtree(ROOT / "var" / "bench", ignore_errors=True)


if __name__ == "__main__":
    main()
