"""bench/packet_intake: packet.submitted applied in-process (fleet.intake.receive, no HTTP) on a
20,000-task run on PostgreSQL, against claim.posted applied the same way in the same run.

Prints the milliseconds per packet and per claim (the anchor), their ratio, and the statements
one packet costs. Each packet stops another task (the common case: a task's first stop, a new
escalation), as in bench/ingest.py. Run: `.venv/bin/python bench/packet_intake.py [--packets 200]`.
The database is bulkhead_bench_packets (BENCH_DB_SUFFIX appended); the broker and the cache are
CELERY_BROKER_URL and CACHE_URL (nothing consumes the broker's messages: its queue is purged at
the end).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.ingest import TASKS, packet  # noqa: E402

PG = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
DB = "bulkhead_bench_packets" + os.environ.get("BENCH_DB_SUFFIX", "")


def sh(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    if done.returncode:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--packets", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args, _ = parser.parse_known_args()
    sh("dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", DB)
    sh("createdb", "-h", "127.0.0.1", "-U", "postgres", DB)
    os.environ.update(
        DATABASE_URL=f"{PG}/{DB}",
        DJANGO_SETTINGS_MODULE="fleet.settings",
        AGENT_RATE_LIMIT="100000000",
        LOG_LEVEL="WARNING",
    )
    python = sys.executable
    sh(python, str(ROOT / "manage.py"), "migrate", "-v0", env=dict(os.environ))
    sh(python, str(ROOT / "manage.py"), "fleet_create", "bench", env=dict(os.environ))
    agent = json.loads(
        sh(python, str(ROOT / "manage.py"), "agent_create", "bench", "a", "--orchestrator",
           env=dict(os.environ))
    )  # fmt: skip

    import django

    django.setup()
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from fleet import intake, signing
    from fleet.celery import app

    def post(type: str, data: dict) -> intake.Reply:
        body = json.dumps(
            {"type": type, "timestamp": "2026-12-02T10:00:00Z", "data": data}
        ).encode()
        headers = signing.sign(agent["signing_secret"], msg_id=f"msg_{uuid.uuid4().hex}",
                               timestamp=int(time.time()), body=body)  # fmt: skip
        reply = intake.receive(
            agent_id=agent["id"], headers=headers, body=body, content_type="application/json"
        )
        assert reply.status == 202, reply.body
        return reply

    tasks = [{"key": f"t{i}", "agent": "a"} for i in range(TASKS)]
    post("run.started", {"run": "r", "tasks": tasks})
    post("packet.submitted", {"run": "r", "task": "t0", "packet": packet(0, "t0")})  # warm
    with CaptureQueriesContext(connection) as queries:
        post("packet.submitted", {"run": "r", "task": "t1", "packet": packet(1, "t1")})
    sql = [q["sql"] for q in queries.captured_queries]
    end = next(i for i, s in enumerate(sql) if s.startswith('INSERT INTO "fleet_event"'))
    skip = ("SAVEPOINT", "RELEASE SAVEPOINT", "BEGIN", "COMMIT")
    statements = len([s for s in sql[: end + 1] if not s.startswith(skip)])
    if os.environ.get("BENCH_SHOW_SQL"):
        print("\n".join(s[:160] for s in sql[: end + 1]))

    if os.environ.get("BENCH_PROFILE"):
        import cProfile
        import pstats

        profile = cProfile.Profile()
        profile.enable()
        for i in range(100, 300):
            post("packet.submitted", {"run": "r", "task": f"t{i}", "packet": packet(i, f"t{i}")})
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(45)
        return
    n = 2
    packet_ms: list[float] = []
    claim_ms: list[float] = []
    for _ in range(args.rounds):
        began = time.perf_counter()
        for _ in range(args.packets):
            own = f"t{n}"
            post("packet.submitted", {"run": "r", "task": own, "packet": packet(n, own)})
            n += 1
        packet_ms.append((time.perf_counter() - began) * 1000 / args.packets)
        began = time.perf_counter()
        for _ in range(args.packets):
            own = f"t{n}"
            claim = {"key": f"c-{n}", "statement": "customers has customer_tier " * 20}
            post("claim.posted", {"run": "r", "task": own, "claim": claim})
            n += 1
        claim_ms.append((time.perf_counter() - began) * 1000 / args.packets)
    app.control.purge()
    packet_median, claim_median = statistics.median(packet_ms), statistics.median(claim_ms)
    print(f"packet.submitted in-process on a {TASKS:,}-task run: {statements} statements")
    print(f"  packet.submitted: {packet_median:.1f} ms each (rounds: "
          + ", ".join(f"{m:.1f}" for m in packet_ms) + ")")  # fmt: skip
    print(f"  claim.posted (anchor): {claim_median:.1f} ms each (rounds: "
          + ", ".join(f"{m:.1f}" for m in claim_ms) + ")")  # fmt: skip
    print(f"  ratio packet / claim: {packet_median / claim_median:.2f}")


if __name__ == "__main__":
    main()
