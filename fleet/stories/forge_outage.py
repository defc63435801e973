"""The forge outage (seeds/001): a repository's initialisation while GitHub is unreachable.

Two protocol validations, a work log and Markdown checks are local; authentication, two pushes
and a bot commit need the forge. The forge goes down before any of them ran: the local work
completes, the forge work waits with `capability:forge` and is never attempted, and when the
forge comes back it is released on that event, from the checkpointed blockers.
"""

from fleet.stories import Step, Story

RUN = "repository-init"
LOCAL = (
    "validate-planning-protocol",
    "validate-research-protocol",
    "write-work-log",
    "check-markdown",
)
FORGE = ("forge-authenticate", "push-main", "push-work-log", "bot-commit-status")

TASKS = [
    {"key": "validate-planning-protocol", "title": "Validate the planning protocol", "agent": "initializer"},
    {"key": "validate-research-protocol", "title": "Validate the research protocol", "agent": "initializer"},
    {"key": "write-work-log", "title": "Write the work log", "agent": "initializer"},
    {"key": "check-markdown", "title": "Check the Markdown files", "agent": "initializer",
     "prerequisites": ["write-work-log"]},
    {"key": "forge-authenticate", "title": "Authenticate to GitHub", "agent": "initializer",
     "capabilities": ["forge"]},
    {"key": "push-main", "title": "Push main", "agent": "initializer", "effect": "external",
     "prerequisites": ["forge-authenticate", "validate-planning-protocol", "validate-research-protocol"],
     "capabilities": ["forge"]},
    {"key": "push-work-log", "title": "Push the work log", "agent": "initializer", "effect": "external",
     "prerequisites": ["push-main", "check-markdown"], "capabilities": ["forge"]},
    {"key": "bot-commit-status", "title": "Bot commit of the status file", "agent": "initializer",
     "effect": "external", "prerequisites": ["forge-authenticate"], "capabilities": ["forge"]},
]  # fmt: skip


def local_work(start: float) -> list[Step]:
    steps = []
    for i, key in enumerate(LOCAL):
        attempt = {"prompt_hash": f"prompt:{key}", "context_hash": "context:repo-init"}
        at = start + 2 * i
        steps.append(
            Step("initializer", "task.started", at, {"run": RUN, "task": key, "attempt": attempt})
        )
        steps.append(
            Step(
                "initializer",
                "task.finished",
                at + 1,
                {"run": RUN, "task": key, "outcome": "succeeded"},
            )
        )
    return steps


STORY = Story(
    name="forge-outage",
    title="Repository initialisation while the forge is down",
    agents=(("initializer", "repository", False), ("operator", "operations", True)),
    steps=(
        Step("operator", "run.started", 0, {"run": RUN, "title": "Initialise the research repository", "tasks": TASKS}),
        Step("operator", "capability.changed", 1,
             {"capability": "forge", "status": "down", "reason": "Internet lost: GitHub authentication and pushes fail"}),
        # The agent tries to authenticate anyway: the gate refuses, nothing reaches the forge.
        Step("initializer", "task.started", 1.5,
             {"run": RUN, "task": "forge-authenticate", "attempt": {"prompt_hash": "p", "context_hash": "c"}},
             expect=409),
        *local_work(2),
        Step("operator", "capability.changed", 12, {"capability": "forge", "status": "up", "reason": "Connection restored"}),
    ),
)  # fmt: skip

# Index of the step after which the forge is back (for tests that stop before it).
FORGE_BACK = len(STORY.steps) - 1
