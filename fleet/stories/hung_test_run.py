"""The hung test run (seeds/003): an implement session leaves `./mvnw test` running.

The session ends its turn with the test run still in the background, which is killed; it is
resumed once and ends the same way. The run carries on with a progress line naming the killed
work; the next step, a deterministic PR check, finds no PR, and the run fails with a cause that
names the killed work ahead of its own.
"""

from fleet.stories import Step, Story

RUN = "implement-issue-302"
KILLED = [{"task": "./mvnw test"}]
SAME_CONTEXT = {"prompt_hash": "prompt:implement-302", "context_hash": "context:issue-302"}

TASKS = [
    {"key": "implement", "title": "Implement issue 302", "agent": "implementer"},
    {"key": "check-pr", "title": "Check the PR exists", "agent": "pr-check", "prerequisites": ["implement"]},
    {"key": "mark-ready", "title": "Mark the PR ready", "agent": "pr-check", "prerequisites": ["check-pr"]},
    {"key": "deliver", "title": "Deliver", "agent": "harness", "prerequisites": ["mark-ready"]},
]  # fmt: skip

STORY = Story(
    name="hung-test-run",
    title="An implement session that leaves its test run hanging",
    agents=(
        ("harness", "orchestration", True),
        ("implementer", "implementation", False),
        ("pr-check", "delivery", False),
    ),
    tools=("pr-check",),
    steps=(
        Step("harness", "run.started", 0, {"run": RUN, "title": "Implement issue 302", "tasks": TASKS}),
        Step("implementer", "task.started", 1, {"run": RUN, "task": "implement", "attempt": SAME_CONTEXT}),
        Step("implementer", "task.finished", 20,
             {"run": RUN, "task": "implement", "outcome": "succeeded", "background_killed": KILLED,
              "resumable": True}),
        # The policy resumes it once, with the same context.
        Step("implementer", "task.started", 21, {"run": RUN, "task": "implement", "attempt": SAME_CONTEXT}),
        Step("implementer", "task.finished", 35,
             {"run": RUN, "task": "implement", "outcome": "succeeded", "background_killed": KILLED,
              "resumable": True}),
        Step("pr-check", "task.started", 36,
             {"run": RUN, "task": "check-pr", "attempt": {"prompt_hash": "tool", "context_hash": "tool"}}),
        Step("pr-check", "task.finished", 37,
             {"run": RUN, "task": "check-pr", "outcome": "failed",
              "failure": {"kind": "spec", "signature": "no-pr", "message": "no PR found"}}),
    ),
)  # fmt: skip

PROGRESS = (
    "implement: the Resume ended with a background task still running (./mvnw test), "
    "which was killed; carrying on"
)
CAUSE_PREFIX = (
    "implement session ended with a background task still running (./mvnw test), "
    "which was killed, and a later step failed: "
)
