"""The migration nobody applied: a verified claim refuted under a running coder (seeds/000).

The planner cites the repository's migration that adds `customers.customer_tier`; the verifier
re-reads the file, which is there: verified. The coder starts on the plan (it names no
`consumes`: it consumes the plan's claims). The schema agent, whose job is to check the claim
against the live order database (`checks`), runs the query: the column is not there, the
migration was never applied. The claim is refuted, the planner reframed, and the coder, running
on it, is sent `task.halted` with the real columns. It finishes anyway; its pull request (which
declared `consumes: []`) is not released: it waits with `claim:plan.tier-column` until the
claim is settled again.
"""

from pathlib import Path

from fleet.stories import Step, Story
from fleet.stories.all_green import COLUMNS_QUERY, REAL_COLUMNS, columns_evidence
from runs.claims.hashing import file_read_payload, payload_hash

RUN = "tier-migration"
CLAIM = "plan.tier-column"
WORKSPACE = "orders-repo"
MIGRATION = "db/migrations/0042_customer_tier.sql"
MIGRATION_SQL = "ALTER TABLE customers ADD COLUMN customer_tier TEXT;\n"
HALTED = "discount-resolver"
HELD = "open-pr"


def build_repository(path: Path) -> None:
    """The order service's repository: a migration that adds the column, written, not applied."""
    (path / MIGRATION).parent.mkdir(parents=True, exist_ok=True)
    (path / MIGRATION).write_text(MIGRATION_SQL)


def migration_evidence() -> dict[str, object]:
    payload = file_read_payload(path=MIGRATION, start=1, end=1, lines=[MIGRATION_SQL.strip()])
    return {
        "kind": "file_read",
        "source": f"{MIGRATION}:1-1",
        "payload_hash": payload_hash(payload),
        "payload": payload,
        "workspace": WORKSPACE,
    }


TASKS = [
    {"key": "plan", "title": "Plan the tier lookup", "agent": "planner"},
    {"key": "confirm-schema", "title": "Check the plan against the live database", "agent": "schema",
     "prerequisites": ["plan"], "checks": [CLAIM]},
    {"key": HALTED, "title": "Build the discount resolver", "agent": "coder-a",
     "prerequisites": ["plan"]},
    {"key": HELD, "title": "Open the resolver's pull request", "agent": "coder-b",
     "prerequisites": [HALTED], "consumes": []},
]  # fmt: skip


def attempt(task: str) -> dict[str, str]:
    return {"prompt_hash": f"prompt:{task}", "context_hash": f"context:{task}"}


STORY = Story(
    name="halted-consumer",
    title="A verified claim refuted under a running coder",
    agents=(
        ("orchestrator", "orchestration", True),
        ("planner", "planning", False),
        ("schema", "schema", False),
        ("coder-a", "coding", False),
        ("coder-b", "coding", False),
    ),
    steps=(
        Step("orchestrator", "run.started", 0,
             {"run": RUN, "title": "Look up customer tiers (the migration nobody applied)", "tasks": TASKS}),
        Step("planner", "task.started", 0, {"run": RUN, "task": "plan", "attempt": attempt("plan")}),
        Step("planner", "claim.posted", 1,
             {"run": RUN, "task": "plan", "claim": {
                 "key": CLAIM,
                 "statement": "`customers` has a `customer_tier` column (added by migration 0042)",
                 "evidence": migration_evidence()}}),
        Step("planner", "task.finished", 1.5, {"run": RUN, "task": "plan", "outcome": "succeeded"}),
        # Verified from the repository: the coder may build on it.
        Step("coder-a", "task.started", 2, {"run": RUN, "task": HALTED, "attempt": attempt(HALTED)}),
        Step("schema", "task.started", 2, {"run": RUN, "task": "confirm-schema", "attempt": attempt("schema")}),
        # The live database has no such column: refuted, and the running coder is halted.
        Step("schema", "claim.checked", 4,
             {"run": RUN, "task": "confirm-schema", "claim": CLAIM, "verdict": "refuted",
              "evidence": columns_evidence(COLUMNS_QUERY, REAL_COLUMNS)}),
        Step("schema", "task.finished", 4.5, {"run": RUN, "task": "confirm-schema", "outcome": "succeeded"}),
        Step("coder-a", "task.finished", 6,
             {"run": RUN, "task": HALTED, "outcome": "succeeded",
              "artifacts": [{"kind": "branch", "ref": "orders:tier-resolver"}]}),
        # What the halted coder produced releases nothing.
        Step("coder-b", "task.started", 7, {"run": RUN, "task": HELD, "attempt": attempt(HELD)},
             expect=409),
    ),
)  # fmt: skip

# Steps after which the worker must have acted (the verifier's verdict; the refutation).
VERIFIED = 3
REFUTED = 6
