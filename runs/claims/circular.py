"""Circular checks: evidence that only repeats the run's own word, however real it is.

The seed's schema agent "confirmed" the planner's column by reading the planner's plan. The same
happens when a producer checks its own claim, or when a checker reads, through the file system,
a file another task of the run reported as its artifact: reality matches the evidence, and the
evidence is the fleet's own output. docs/evidence.md lists the reasons an agent sees.
"""

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Final

from runs.claims.bearing import cites_an_agent
from runs.models import Artifact, Claim, Evidence

AGENT_TEXT: Final = "another agent's text is not evidence"
_LINE_RANGE: Final = re.compile(r"(?P<path>.+):[0-9]+-[0-9]+", re.DOTALL)


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
        checker = next(
            (who for who in (row.submitted_by, row.sent_by) if who in producers(claim)), None
        )
        if checker is not None:
            return (
                f"{checker} produced this claim: a check by its producer is circular "
                "and never verifies it"
            )
    if row.kind == "file_read":
        return artifact_read(claim, row)
    return None


def producers(claim: Claim) -> set[str]:
    """Who produced the claim: who posted it, the orchestrator that sent it for them, and the
    producing task's agent (`agent:<name>`)."""
    return {claim.posted_by, claim.sent_by, f"agent:{claim.task.agent.name}"} - {""}


def artifact_read(claim: Claim, row: Evidence) -> str | None:
    """A file_read of a file that another task of the run reported as its artifact."""
    paths = read_paths(row)
    for artifact in others_artifacts(claim, row):
        for path in paths:
            if same_file(path, artifact.ref) or (artifact.url and same_file(path, artifact.url)):
                return artifact_reason(path, artifact)
    return None


def artifact_read_through(claim: Claim, row: Evidence, workspaces: Mapping[str, str]) -> str | None:
    """The same, by the file the read reaches in its workspace: a link or another spelling of
    an artifact's path (`alias.txt` linked to the reported `f.txt`) is still the artifact."""
    name = row.workspace or (next(iter(workspaces)) if len(workspaces) == 1 else None)
    if name is None or name not in workspaces:
        return None  # the verifier cannot read it either, and says why
    root = Path(workspaces[name])
    read = {found: path for path in read_paths(row) if (found := file_in(root, path))}
    if not read:
        return None
    for artifact in others_artifacts(claim, row):
        reported = file_in(root, artifact.ref)
        if reported is not None and reported in read:
            return artifact_reason(read[reported], artifact)
    return None


def file_in(root: Path, path: str) -> tuple[int, int] | None:
    """The file `path` names in the workspace at `root` (device and inode, links followed), or
    None when it names none there."""
    if not path or "\x00" in path or ".." in PurePath(path).parts:
        return None
    try:
        found = os.stat(root / path.strip())
    except (OSError, ValueError):
        return None
    return (found.st_dev, found.st_ino) if stat.S_ISREG(found.st_mode) else None


def read_paths(row: Evidence) -> set[str]:
    """The paths a file_read names: in its source (path:start-end) and its payload."""
    paths = set()
    match = _LINE_RANGE.fullmatch(row.source.strip())
    if match is not None:
        paths.add(match["path"])
    if isinstance(row.payload, dict) and isinstance(row.payload.get("path"), str):
        paths.add(row.payload["path"])
    return paths


def others_artifacts(claim: Claim, row: Evidence) -> list[Artifact]:
    """The run's artifacts, but those of the task submitting `row` (its own files are its work)."""
    artifacts = Artifact.objects.filter(task__run_id=claim.run_id).select_related("task")
    if row.task_id is not None:
        artifacts = artifacts.exclude(task_id=row.task_id)
    return list(artifacts.order_by("id"))


def artifact_reason(path: str, artifact: Artifact) -> str:
    return (
        f"{path} is the artifact task {artifact.task.key} reported "
        f"({artifact.kind} {artifact.ref}): the run's own output is not evidence, "
        "and reading it never verifies a claim"
    )


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
