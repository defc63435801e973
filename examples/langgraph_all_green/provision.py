"""Provision a fleet for the example on the running app: its five agents, the order database
registered as the `orders` data source, and `make run`'s reviewer (or BULKHEAD_REVIEWER) as its
reviewer, who answers the escalation the story ends in. Prints the environment for
orchestrator.py.

    .venv/bin/python examples/langgraph_all_green/provision.py [FLEET]   # from the repository

A fleet is provisioned once: for another go, give another name (`provision.py langgraph-2`).
"""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ("orchestrator", "planner", "schema", "coder-a", "coder-b")
REVIEWER = os.environ.get("BULKHEAD_REVIEWER", "reviewer")  # the login `make run` prints


def manage(*args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        again = "already exists" in done.stderr
        hint = (
            f"\nprovisioned before? give another fleet name: provision.py {args[1]}-2"
            if again
            else ""
        )
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{done.stderr.strip()}{hint}")
    return dict(json.loads(done.stdout))


def build_orders(path: Path) -> None:
    """The order database: `customers` has loyalty_points and no customer_tier."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, "
            "email TEXT NOT NULL, loyalty_points INTEGER NOT NULL DEFAULT 0)"
        )
    db.close()


def main() -> None:
    fleet = sys.argv[1] if len(sys.argv) > 1 else "langgraph"
    manage("fleet_create", fleet)
    created = {name: manage("agent_create", fleet, name, *(["--orchestrator"] if name == "orchestrator" else []))
               for name in AGENTS}  # fmt: skip
    orders = ROOT / "var" / "examples" / f"{fleet}-orders.sqlite3"
    build_orders(orders)
    manage("source_add", fleet, "datasource", "orders", str(orders))
    member = manage("member_add", REVIEWER, "--fleet", fleet, "--role", "reviewer")
    # To the terminal, also under `eval "$(provision.py)"`, which takes only the exports.
    print(
        f"{REVIEWER} reviews the fleet {fleet}: the escalation waits in their queue",
        file=sys.stderr,
    )
    if member.get("password"):
        print(f"{REVIEWER} is new; their one-time password: {member['password']}", file=sys.stderr)
    orchestrator = created["orchestrator"]
    print(f"export BULKHEAD_ENDPOINT={orchestrator['endpoint']}")
    print(f"export BULKHEAD_SECRET={orchestrator['signing_secret']}")
    print(f"export BULKHEAD_TOKEN={orchestrator['api_token']}")
    print(f"export ORDERS_DB={orders}")


if __name__ == "__main__":
    main()
