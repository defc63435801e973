"""The all-green run and its replay (seeds/000): an invented column and how far it travelled.

As it happened (imported from `all_green_run.jsonl`): the planner invents
`customers.customer_tier`, the schema agent "confirms" it from the plan, two coders build on it,
and a reviewer finds it 40 minutes in, after 4 PRs. Replayed live with containment on: the claim
is unverified; the schema agent's first, careless "confirmation" (`SELECT 1` on the order database)
is real but does not mention the column, so it confirms nothing; its query of the `customers`
columns refutes the claim, the planner is reframed with the real columns and no coder starts. The reframed plan needs a tier source
that does not exist either: the second, differently prompted failure agrees with the first and
escalates with the seed's failure packet, whose question waits for a reviewer.
"""

import sqlite3
from pathlib import Path

from fleet import services
from fleet.models import Agent, Fleet
from fleet.stories import Step, Story
from runs.claims.hashing import payload_hash, query_result_payload

IMPORTED = Path(__file__).with_name("all_green_run.jsonl")
IMPORTED_AGENTS = ("planner", "schema", "coder-a", "coder-b")  # who posted the past run
RUN = "tier-discounts-replay"
CLAIM = "plan.tier-source"
CARELESS = "schema.customer-tier-confirmed"  # confirmed with a query that is about nothing
REAL_COLUMNS = ["id", "name", "email", "loyalty_points"]
COLUMNS_QUERY = "SELECT name AS column_name FROM pragma_table_info('customers') ORDER BY cid"
TIERS_QUERY = "SELECT name AS column_name FROM pragma_table_info('loyalty_tiers') ORDER BY cid"
ANSWER = "Use the loyalty_points threshold in pricing-config.yaml"
PRICING_CONFIG = "discounts:\n  tier_source: loyalty_points\n  gold_threshold: 1000\n"


def build_orders(path: Path) -> None:
    """The demo order database: `customers` has loyalty_points and no customer_tier."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        return
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, "
            "email TEXT NOT NULL, loyalty_points INTEGER NOT NULL DEFAULT 0)"
        )
        db.executemany(
            "INSERT INTO customers (name, email, loyalty_points) VALUES (?, ?, ?)",
            [("Ada", "ada@example.com", 1200), ("Grace", "grace@example.com", 300)],
        )
    db.close()


def build_workspace(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "pricing-config.yaml").write_text(PRICING_CONFIG)


def select_1() -> dict[str, object]:
    """The careless check: a query that runs, and says nothing about any table or column."""
    payload = query_result_payload(columns=["1"], rows=[[1]])
    return {
        "kind": "query_result",
        "source": "SELECT 1",
        "payload_hash": payload_hash(payload),
        "payload": payload,
        "datasource": "orders",
    }


def columns_evidence(query: str, columns: list[str]) -> dict[str, object]:
    payload = query_result_payload(columns=["column_name"], rows=[[c] for c in columns])
    return {
        "kind": "query_result",
        "source": query,
        "payload_hash": payload_hash(payload),
        "payload": payload,
        "datasource": "orders",
    }


TASKS = [
    {"key": "plan", "title": "Plan tier-based discounts", "agent": "planner"},
    {"key": "confirm-schema", "title": "Confirm the schema assumptions", "agent": "schema",
     "prerequisites": ["plan"], "checks": [CLAIM]},
    {"key": "discount-resolver", "title": "Build the discount resolver", "agent": "coder-a",
     "prerequisites": ["confirm-schema"], "consumes": [CLAIM]},
    {"key": "api-change", "title": "Change the order API", "agent": "coder-b",
     "prerequisites": ["confirm-schema"], "consumes": [CLAIM]},
    {"key": "api-tests", "title": "Test the API change", "agent": "coder-b",
     "prerequisites": ["api-change"], "consumes": [CLAIM]},
]  # fmt: skip

PACKET = {
    "task": "plan",
    "tried": [
        "Resolve discount rule via customers.customer_tier (from plan)",
        "Reframed with live schema from information_schema",
    ],
    "ruled_out": [
        {
            "hypothesis": "column exists under another name",
            "how": "searched customers, accounts, loyalty_* for tier-like columns; none found",
        },
        {
            "hypothesis": "tier is computed elsewhere",
            "how": "grep for 'tier' in services/ and db/migrations; no producer found",
        },
    ],
    "evidence": [columns_evidence(COLUMNS_QUERY, REAL_COLUMNS)],
    "smallest_unblocking_question": (
        "Where does a customer's tier come from today: a new column we should add, "
        "or the loyalty_points threshold in pricing-config.yaml?"
    ),
    "options": ["Add a new customer_tier column", ANSWER],
}


def attempt(n: int) -> dict[str, str]:
    return {"prompt_hash": f"prompt:plan-v{n}", "context_hash": f"context:plan-v{n}"}


STORY = Story(
    name="all-green-replay",
    title="The all-green run replayed with containment on",
    agents=(
        ("orchestrator", "orchestration", True),
        ("planner", "planning", False),
        ("schema", "schema", False),
        ("coder-a", "coding", False),
        ("coder-b", "coding", False),
    ),
    steps=(
        Step("orchestrator", "run.started", 0,
             {"run": RUN, "title": "Add tier-based discounts (replay, containment on)", "tasks": TASKS}),
        Step("planner", "task.started", 0, {"run": RUN, "task": "plan", "attempt": attempt(1)}),
        Step("planner", "claim.posted", 1,
             {"run": RUN, "task": "plan", "claim": {
                 "key": CLAIM, "load_bearing": True,
                 "statement": "Use the existing `customer_tier` column on `customers` to select the discount rule"}}),
        Step("planner", "task.finished", 1, {"run": RUN, "task": "plan", "outcome": "succeeded"}),
        Step("schema", "task.started", 1.5,
             {"run": RUN, "task": "confirm-schema", "attempt": {"prompt_hash": "prompt:schema", "context_hash": "context:schema"}}),
        # Its habit: "confirmed", with a query that runs but is about nothing. It stays unverified.
        Step("schema", "claim.posted", 2,
             {"run": RUN, "task": "confirm-schema", "claim": {
                 "key": CARELESS, "load_bearing": True,
                 "statement": "confirmed: `customers.customer_tier` exists", "evidence": select_1()}}),
        # The schema agent may not cite the plan: it runs the query, and reality refutes the claim.
        Step("schema", "claim.checked", 3,
             {"run": RUN, "task": "confirm-schema", "claim": CLAIM, "verdict": "refuted",
              "evidence": columns_evidence(COLUMNS_QUERY, REAL_COLUMNS)}),
        Step("schema", "task.finished", 3, {"run": RUN, "task": "confirm-schema", "outcome": "succeeded"}),
        # No coder starts on the bad plan.
        Step("coder-a", "task.started", 4,
             {"run": RUN, "task": "discount-resolver", "attempt": {"prompt_hash": "prompt:resolver", "context_hash": "context:plan-v1"}},
             expect=409),
        # The planner, reframed with the real columns, looks for a tier source that is not there.
        Step("planner", "task.started", 5, {"run": RUN, "task": "plan", "attempt": attempt(2)}),
        Step("planner", "claim.posted", 6,
             {"run": RUN, "task": "plan", "claim": {
                 "key": "plan.tier-table", "load_bearing": True,
                 "statement": "Customer tiers are kept in the `loyalty_tiers` table",
                 "evidence": columns_evidence(TIERS_QUERY, ["customer_id", "tier"])}}),
        Step("planner", "packet.submitted", 7, {"run": RUN, "task": "plan", "packet": PACKET}),
    ),
)  # fmt: skip

# Steps after which the worker must have decided (the refutation's reframe; the escalation).
REFUTED = 6
TIER_TABLE = 10


def ensure_imported_agents(fleet: "Fleet") -> None:
    for name in IMPORTED_AGENTS:
        if not Agent.objects.filter(fleet=fleet, name=name).exists():
            services.agent_create(fleet=fleet, name=name)
