"""The tier thresholds: an escalation the retry policy opens, whose packet Bulkhead drafts.

The planner, asked for the silver and gold thresholds of the tier discounts (seeds/000: "Suppose
the reframed plan had also needed a tier source that doesn't exist"), finds the gold threshold in
the demo's pricing config and invents a silver one; the verifier refutes it from the file itself,
and the planner is reframed with the real lines. The reframed attempt claims a `tier` column on
`customers` that the order database does not have: the second, differently prompted failure
agrees with the first and the policy escalates. The planner sends no packet; Bulkhead drafts it
from what it recorded (the two attempts and their decisions, the two refuted claims, the checked
evidence), re-checks its evidence, and asks the planner only for the question.
"""

from fleet.stories import Step, Story
from fleet.stories.all_green import COLUMNS_QUERY, PRICING_CONFIG, REAL_COLUMNS, columns_evidence
from runs.claims.hashing import file_read_payload, payload_hash

RUN = "tier-thresholds"
CONFIG = "pricing-config.yaml"
REAL_LINES = PRICING_CONFIG.rstrip("\n").split("\n")  # discounts, tier_source, gold_threshold


def lines_evidence(start: int, end: int, lines: list[str]) -> dict[str, object]:
    payload = file_read_payload(path=CONFIG, start=start, end=end, lines=lines)
    return {
        "kind": "file_read",
        "source": f"{CONFIG}:{start}-{end}",
        "payload_hash": payload_hash(payload),
        "payload": payload,
        "workspace": "pricing",
    }


def attempt(n: int) -> dict[str, str]:
    return {"prompt_hash": f"prompt:thresholds-v{n}", "context_hash": f"context:thresholds-v{n}"}


TASKS = [
    {"key": "find-thresholds", "title": "Find the silver and gold tier thresholds",
     "agent": "planner"},
    {"key": "apply-thresholds", "title": "Apply the thresholds to the discount rule",
     "agent": "coder-a", "prerequisites": ["find-thresholds"]},
]  # fmt: skip

GOLD = "thresholds.gold"
SILVER = "thresholds.silver"
SILVER_SOURCE = "thresholds.silver-source"

STORY = Story(
    name="tier-thresholds",
    title="The tier thresholds: a packet Bulkhead drafts from the attempts",
    agents=(
        ("orchestrator", "orchestration", True),
        ("planner", "planning", False),
        ("coder-a", "coding", False),
    ),
    steps=(
        Step("orchestrator", "run.started", 0,
             {"run": RUN, "title": "Tier thresholds for the discount rule", "tasks": TASKS}),
        Step("planner", "task.started", 0,
             {"run": RUN, "task": "find-thresholds", "attempt": attempt(1)}),
        # Checked against the file: verified.
        Step("planner", "claim.posted", 1,
             {"run": RUN, "task": "find-thresholds", "claim": {
                 "key": GOLD, "load_bearing": True,
                 "statement": f"`gold_threshold` in `{CONFIG}` is 1000 loyalty points",
                 "evidence": lines_evidence(3, 3, REAL_LINES[2:3])}}),
        # Invented: the file has no silver threshold. Refuted, and the planner is reframed.
        Step("planner", "claim.posted", 2,
             {"run": RUN, "task": "find-thresholds", "claim": {
                 "key": SILVER, "load_bearing": True,
                 "statement": f"`silver_threshold` in `{CONFIG}` is 500 loyalty points",
                 "evidence": lines_evidence(
                     1, 3, ["discounts:", "  silver_threshold: 500", "  gold_threshold: 1000"])}}),
        Step("planner", "task.started", 4,
             {"run": RUN, "task": "find-thresholds", "attempt": attempt(2)}),
        # Reframed with the real lines, it looks for a silver tier on customers: refuted again,
        # the same way, so the policy escalates; the planner sends no packet.
        Step("planner", "claim.posted", 5,
             {"run": RUN, "task": "find-thresholds", "claim": {
                 "key": SILVER_SOURCE, "load_bearing": True,
                 "statement": "`customers` keeps the silver tier in a `tier` column",
                 "evidence": columns_evidence(COLUMNS_QUERY, [*REAL_COLUMNS, "tier"])}}),
    ),
)  # fmt: skip

# Steps after which the worker must have decided (the reframe; the escalation).
REFUTED = 3
ESCALATED = 5
