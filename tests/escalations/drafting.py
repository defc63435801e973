"""Builders for the drafted and priced packet tests: an order database the verifier can read, and
a task the retry policy escalates (two differently prompted attempts refuted the same way)."""

import sqlite3
from pathlib import Path
from typing import Any

from escalations.models import Escalation
from fleet import services
from fleet.models import Fleet
from runs.claims.hashing import payload_hash, query_result_payload
from tests.escalations.desk import Desk

REAL_COLUMNS = ["id", "name", "email", "loyalty_points"]
COLUMNS_QUERY = "SELECT name AS column_name FROM pragma_table_info('customers') ORDER BY cid"
TIERS_QUERY = "SELECT name AS column_name FROM pragma_table_info('loyalty_tiers') ORDER BY cid"
QUESTION = "Where does a customer's tier come from today?"


def orders_database(fleet: Fleet, directory: Path) -> Path:
    """The fleet's `orders` data source: customers with loyalty_points, no tier anywhere."""
    path = directory / "orders.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, email TEXT, "
            "loyalty_points INTEGER)"
        )
    db.close()
    services.source_add(fleet=fleet, kind="datasource", name="orders", value=str(path))
    return path


def columns_evidence(query: str, columns: list[str]) -> dict[str, Any]:
    payload = query_result_payload(columns=["column_name"], rows=[[c] for c in columns])
    return {
        "kind": "query_result",
        "source": query,
        "payload_hash": payload_hash(payload),
        "payload": payload,
        "datasource": "orders",
    }


def claim(desk: Desk, key: str, statement: str, evidence: dict[str, Any]) -> None:
    response = desk.planner.post(
        "claim.posted",
        {
            "run": "tier-discounts",
            "task": "plan",
            "claim": {
                "key": key,
                "statement": statement,
                "load_bearing": True,
                "evidence": evidence,
            },
        },
    )
    assert response.status_code == 202, response.content


def start(desk: Desk, n: int) -> None:
    response = desk.planner.post(
        "task.started",
        {
            "run": "tier-discounts",
            "task": "plan",
            "attempt": {"prompt_hash": f"prompt:v{n}", "context_hash": f"context:v{n}"},
        },
    )
    assert response.status_code == 202, response.content


def escalated_by_the_policy(desk: Desk) -> Escalation:
    """The planner's invented column is refuted (reframe), then its reframed tier table is too:
    the signal rule escalates, and the planner sends no packet."""
    start(desk, 1)
    claim(
        desk,
        "plan.customer-tier",
        "`customers` has a `customer_tier` column",
        columns_evidence(COLUMNS_QUERY, [*REAL_COLUMNS, "customer_tier"]),
    )
    start(desk, 2)
    claim(
        desk,
        "plan.tier-table",
        "Customer tiers are kept in `loyalty_tiers`",
        columns_evidence(TIERS_QUERY, ["customer_id", "tier"]),
    )
    return Escalation.objects.select_related("packet").get(task__key="plan")


def submit(desk: Desk, packet: dict[str, Any], task: str = "plan") -> Any:
    return desk.planner.post(
        "packet.submitted", {"run": "tier-discounts", "task": task, "packet": packet}
    )
