"""Circular checks: evidence that only repeats the run's own word, however real it is.

The seed's schema agent "confirmed" the planner's column by reading the planner's plan. The same
happens when a producer checks its own claim, or when a checker reads, through the file system,
a file another task of the run reported as its artifact: reality matches the evidence, and the
evidence is the fleet's own output. docs/evidence.md lists the reasons an agent sees.
"""

import re
from typing import Final

from runs.models import Artifact, Claim, Evidence

AGENT_TEXT: Final = "another agent's text is not evidence"
_LINE_RANGE: Final = re.compile(r"(?P<path>.+):[0-9]+-[0-9]+", re.DOTALL)


def cites_an_agent(source: str) -> bool:
    """Evidence pointing at another agent's output: never checked, never a verdict's basis."""
    return source.lstrip().lower().startswith("agent:")


def circular(claim: Claim, row: Evidence, verdict: str) -> str | None:
    """Why `row` cannot settle `claim` as `verdict` whatever reality says, or None.

    A producer may refute its own claim (it found out it was wrong); it never verifies it.
    """
    if cites_an_agent(row.source):
        return AGENT_TEXT
    if row.role == Evidence.Role.CHECK and verdict == Claim.Status.VERIFIED:
        if row.task_id is not None and row.task_id == claim.task_id:
            return (
                f"task {claim.task.key} produced this claim: a check by its producer is "
                "circular and never verifies it"
            )
        if row.submitted_by in producers(claim):
            return (
                f"{row.submitted_by} produced this claim: a check by its producer is circular "
                "and never verifies it"
            )
    if row.kind == "file_read":
        return artifact_read(claim, row)
    return None


def producers(claim: Claim) -> set[str]:
    """Who produced the claim: who posted it, and the producing task's agent (`agent:<name>`)."""
    return {claim.posted_by, f"agent:{claim.task.agent.name}"} - {""}


def artifact_read(claim: Claim, row: Evidence) -> str | None:
    """A file_read of a file that another task of the run reported as its artifact."""
    paths = set()
    match = _LINE_RANGE.fullmatch(row.source.strip())
    if match is not None:
        paths.add(match["path"])
    if isinstance(row.payload, dict) and isinstance(row.payload.get("path"), str):
        paths.add(row.payload["path"])
    artifacts = Artifact.objects.filter(task__run_id=claim.run_id).select_related("task")
    if row.task_id is not None:  # the submitting task's own files are its work, not circular
        artifacts = artifacts.exclude(task_id=row.task_id)
    for artifact in artifacts.order_by("id"):
        for path in paths:
            if same_file(path, artifact.ref) or (artifact.url and same_file(path, artifact.url)):
                return (
                    f"{path} is the artifact task {artifact.task.key} reported "
                    f"({artifact.kind} {artifact.ref}): the run's own output is not evidence, "
                    "and reading it never verifies a claim"
                )
    return None


def same_file(path: str, reported: str) -> bool:
    """`plan.md` is the reported `plan.md`, `./plan.md`, `docs/plan.md` or `https://…/plan.md`."""
    a, b = _normal(path), _normal(reported)
    if not a or not b:
        return False
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def _normal(path: str) -> str:
    text = path.strip()
    while text.startswith("./"):
        text = text[2:]
    return text.rstrip("/")
