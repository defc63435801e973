"""Claims posted in one batch: looked up together and written with bulk inserts.

The common claim — on its producer's own task, a key new to the run, load-bearing, in a run where
no other task is running (so nothing consumes it yet) — needs nothing but its row (and its
evidence's): `post` answers it as `claim_post` would, and `write` inserts every such row at
once. Any other claim is posted on its own by `claim_post` (the caller's `alone`), which says
every refusal as it always does; the claims after it are then looked up again.
"""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

from fleet.models import Agent
from runs import scheduler
from runs.claims.bearing import NO_SUBJECT, subjects_of
from runs.claims.circular import AGENT_TEXT, cites_an_agent
from runs.claims.posting import posted_reason
from runs.models import Claim, Evidence, Run, Task
from runs.specs import ClaimSpec


class Row(NamedTuple):
    """A task the stretch names, as far as posting a claim on it needs."""

    key: str
    pk: int
    run_id: int
    agent_id: UUID
    state: str


@dataclass(frozen=True)
class Posting:
    """One claim.posted of the batch: who posts it, when, and on which run's task."""

    actor: Agent
    sender: Agent
    at: datetime
    run: str
    task: str
    claim: ClaimSpec


class PostedTogether:
    """The claims of a stretch of a batch, looked up in three queries and written in two."""

    def __init__(self, fleet_id: int, wanted: Iterable[tuple[str, str, str]]) -> None:
        """`wanted`: the (run, task, claim key) the stretch names, looked up at once."""
        wanted = list(wanted)
        pairs = {(run, task) for run, task, _ in wanted}
        found = Task.objects.filter(
            run__fleet_id=fleet_id,
            run__key__in={run for run, _ in pairs},
            key__in={task for _, task in pairs},
        ).values_list("run__key", "key", "pk", "run_id", "agent_id", "state")
        # Plain rows, not models: a batch names hundreds of tasks.
        self.tasks = {
            (run, task): Row(task, pk, run_id, agent_id, state)
            for run, task, pk, run_id, agent_id, state in found
            if (run, task) in pairs
        }
        named = {row.run_id: run for (run, _), row in self.tasks.items()}
        self.runs = {run_id: Run(pk=run_id, key=key) for run_id, key in named.items()}
        run_ids = set(self.runs)
        keys = {key for _, _, key in wanted}
        self.taken = set(
            Claim.objects.filter(run_id__in=run_ids, key__in=keys).values_list("run_id", "key")
        )
        self.running: dict[int, set[int]] = defaultdict(set)
        running = Task.objects.filter(run_id__in=run_ids, state=Task.State.RUNNING)
        for run_id, pk in running.values_list("run_id", "pk"):
            self.running[run_id].add(pk)
        self.claims: list[Claim] = []
        self.evidence: list[tuple[Claim, Evidence]] = []

    def post(self, posting: Posting) -> dict[str, Any] | None:
        """The claim's answer, its rows kept for `write`; None when it must be posted alone."""
        row = self.tasks.get((posting.run, posting.task))
        claim = posting.claim
        if (
            row is None
            or row.agent_id != posting.actor.pk
            or not claim.load_bearing
            or (row.run_id, claim.key) in self.taken
            or self.running[row.run_id] - {row.pk}
        ):
            return None
        evidence = claim.evidence
        subjects = subjects_of(claim.about, claim.statement)
        reason = posted_reason(evidence, imported=False, subjects=bool(subjects))
        by = f"agent:{posting.actor.name}"
        run = self.runs[row.run_id]
        posted = Claim(
            run_id=row.run_id,
            task_id=row.pk,
            key=claim.key,
            statement=claim.statement,
            load_bearing=True,
            about=list(claim.about),
            posted_by=by,
            posted_at=posting.at,
            status_reason=reason,
            verification_pending=(
                evidence is not None and not cites_an_agent(evidence.source) and bool(subjects)
            ),
        )
        self.claims.append(posted)
        self.taken.add((row.run_id, claim.key))
        if evidence is not None:
            agent_text = cites_an_agent(evidence.source)
            self.evidence.append(
                (
                    posted,
                    Evidence(
                        role="posted",
                        kind=evidence.kind,
                        source=evidence.source,
                        payload_hash=evidence.payload_hash,
                        payload=evidence.payload,
                        datasource=evidence.datasource or "",
                        workspace=evidence.workspace or "",
                        submitted_by=by,
                        task_id=row.pk,
                        created_at=posting.at,
                        verdict=Claim.Status.UNVERIFIED if agent_text or not subjects else "",
                        verdict_reason=AGENT_TEXT if agent_text else "" if subjects else NO_SUBJECT,
                    ),
                )
            )
        # A running producer's claim holds back nothing that is ready (see claim_post).
        may_hold = row.state != Task.State.RUNNING
        scheduler.mark_changed(run, [row.key], claim=claim.key, may_hold=may_hold)
        return {"run": run.key, "claim": claim.key, "status": posted.status, "reason": reason}

    def alone(self, run: str, task: str, key: str, posted: bool) -> None:
        """A claim of this stretch was posted on its own (`posted`: and stored): its key is taken."""
        row = self.tasks.get((run, task))
        if posted and row is not None:
            self.taken.add((row.run_id, key))

    def write(self) -> None:
        """Insert the claims answered so far, then their evidence; verify them after commit."""
        if not self.claims:
            return
        Claim.objects.bulk_create(self.claims)
        rows = []
        for claim, evidence in self.evidence:
            evidence.claim = claim
            rows.append(evidence)
        Evidence.objects.bulk_create(rows)
        for claim in self.claims:
            if claim.verification_pending:
                scheduler.verify_after_commit(claim)
        self.claims, self.evidence = [], []
