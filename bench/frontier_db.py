"""bench/frontier_db: the database side of a capability going down in a 100,000-task run.

On PostgreSQL, a run of the size bench/frontier.py uses is stored; the forge goes down and the
scheduler writes what changed (blockers set with their time, ready flags). Against it, in the same
run: an UPDATE of exactly the changed task rows by primary key, issued directly through psycopg.
Prints both times and the ratio (goal: within 2x).
Run: `.venv/bin/python bench/frontier_db.py [--tasks 100000] [--repeat 3]`.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PG = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
DB = "bulkhead_bench_frontier" + os.environ.get("BENCH_DB_SUFFIX", "")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args, _ = parser.parse_known_args()

    subprocess.run(["dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", DB], check=True)
    subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", DB], check=True)
    os.environ["DATABASE_URL"] = f"{PG}/{DB}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "fleet.settings"
    os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "0")
    import django

    django.setup()
    import psycopg
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.utils import timezone

    from bench.frontier import FORGE, make_run
    from fleet.models import Agent, Capability, Fleet
    from runs import frontier as rule
    from runs import scheduler
    from runs.models import Prerequisite, Run, Task

    call_command("migrate", verbosity=0)
    nodes = make_run(args.tasks, scattered=False, groups_at_the_end=False)
    fleet = Fleet.objects.create(name="bench")
    agent = Agent.objects.create(fleet=fleet, name="a")
    now = timezone.now()
    run = Run.objects.create(fleet=fleet, key="big", started_by=agent, started_at=now)
    Capability.objects.bulk_create(
        [
            Capability(fleet=fleet, name=name, status=Capability.Status.UP)  # reported up
            for name in sorted({c for n in nodes.values() for c in n.capabilities})
        ]
    )
    began = time.perf_counter()
    tasks = Task.objects.bulk_create(
        [
            Task(run=run, key=n.key, agent=agent, position=i, capabilities=list(n.capabilities),
                 reads_state_of=list(n.reads_state_of), effect=n.effect, transaction=n.transaction or "",
                 weight=n.weight, state=n.state, created_at=now)
            for i, n in enumerate(nodes.values())
        ],
        batch_size=5000,
    )  # fmt: skip
    ids = {t.key: t.pk for t in tasks}
    Prerequisite.objects.bulk_create(
        [
            Prerequisite(task_id=ids[n.key], requires_id=ids[p])
            for n in nodes.values()
            for p in n.prerequisites
        ],
        batch_size=10000,
    )
    print(f"stored {len(nodes)} tasks in {time.perf_counter() - began:.1f} s", flush=True)

    world = scheduler.world_for(run)
    with transaction.atomic():
        scheduler.write(run, {k: b for k, b in rule.frontier(nodes, world).deferred.items()} | {
            k: () for k in rule.frontier(nodes, world).ready
        })  # fmt: skip
    index = rule.build_index(nodes)

    ours: list[float] = []
    direct: list[float] = []
    changed_rows = 0
    for _ in range(args.repeat):
        for status in ("down", "up"):
            Capability.objects.filter(fleet=fleet, name=FORGE).update(status=status)
            world = scheduler.world_for(run)
            previous = scheduler.open_blockers(run)
            touched = rule.touched_by_capability(nodes, FORGE, world, index=index)
            updates = rule.recompute(nodes, world, previous=previous, changed=touched, index=index)
            changed = [ids[k] for k in updates]
            changed_rows = len(changed)
            meta: dict = {}
            scheduler.nodes_for(run, meta=meta)
            began = time.perf_counter()
            with transaction.atomic():
                scheduler.write(run, updates, previous=previous, meta=meta)
            elapsed = time.perf_counter() - began
            if status == "down":
                ours.append(elapsed)
                with psycopg.connect(f"{PG}/{DB}") as conn:
                    began = time.perf_counter()
                    conn.execute("UPDATE runs_task SET ready = false WHERE id = ANY(%s)", [changed])
                    conn.commit()
                    direct.append(time.perf_counter() - began)
    connection.close()
    ours_s, direct_s = statistics.median(ours), statistics.median(direct)
    print(f"changed tasks: {changed_rows} of {len(nodes)}")
    print(
        f"scheduler write (blockers with checkpoint + ready flags): {ours_s * 1000:8.1f} ms (median of {len(ours)})"
    )
    print(f"direct UPDATE of the changed rows by primary key:         {direct_s * 1000:8.1f} ms")
    print(f"ratio scheduler/direct: {ours_s / direct_s:.2f}  (goal <= 2)")
    subprocess.run(["dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", DB], check=False)


if __name__ == "__main__":
    main()
