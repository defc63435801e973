"""The orchestration surface: a run, its frontier, a task's attempt as a `with` block, claims,
checks, escalations and the reviewer's answer."""

import hashlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from bulkhead_client.errors import BulkheadError
from bulkhead_client.events import (
    Artifact,
    Attempt,
    Claim,
    ClaimChecked,
    ClaimPosted,
    Evidence,
    Failure,
    FailureKind,
    Packet,
    PacketSubmitted,
    TaskFinished,
    TaskStarted,
)
from bulkhead_client.responses import (
    Accepted,
    AnswerOut,
    ContextOut,
    EscalationOut,
    EscalationRow,
    FrontierOut,
    RunOut,
    WaitingEscalation,
)

if TYPE_CHECKING:
    from bulkhead_client.client import Bulkhead
    from bulkhead_client.receiver import CallbackReceiver

__all__ = [
    "NoAnswer",
    "PacketReturned",
    "RunHandle",
    "TaskAttempt",
    "TaskFailed",
    "text_hash",
]

T = TypeVar("T")


def text_hash(text: str) -> str:
    """A prompt or context hash: `sha256:` + the hex SHA-256 of the text (any stable hash does)."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


class TaskFailed(Exception):
    """Raise it in a `with run.task(...)` block to report the attempt failed with this failure
    (the block sends `task.finished` with it and does not re-raise it)."""

    def __init__(
        self,
        kind: FailureKind,
        signature: str,
        message: str = "",
        *,
        capability: str | None = None,
    ) -> None:
        self.failure = Failure(
            kind=kind, signature=signature, message=message, capability=capability
        )
        super().__init__(f"{kind}: {signature}: {message}")


class PacketReturned(BulkheadError):
    """A reviewer returned the packet: `missing` names the field, `note` says what to fix."""

    def __init__(self, escalation: int, missing: list[str], note: str | None) -> None:
        self.escalation = escalation
        self.missing = missing
        self.note = note
        super().__init__(f"escalation {escalation} was returned for {missing}: {note}")


class NoAnswer(BulkheadError):
    """No answer within the wait (or the escalation was closed without one)."""


class TaskAttempt:
    """One attempt at a task, inside `with run.task(...) as attempt:`."""

    def __init__(self, run: "RunHandle", task: str, agent: str | None, number: int) -> None:
        self.run = run
        self.task = task
        self.agent = agent
        self.number = number
        self.artifacts: list[Artifact] = []
        self.escalated: Accepted | None = None

    def claim(self, key: str, statement: str, **kwargs: Any) -> Accepted:
        return self.run.claim(self.task, key, statement, agent=self.agent, **kwargs)

    def check(self, claim: str, verdict: str, evidence: Evidence) -> Accepted:
        return self.run.check(self.task, claim, verdict, evidence, agent=self.agent)

    def artifact(self, kind: str, ref: str, url: str | None = None) -> None:
        """Reported with the attempt's `task.finished`."""
        self.artifacts.append(Artifact(kind=kind, ref=ref, url=url))

    def escalate(self, packet: Packet | Mapping[str, Any]) -> Accepted:
        """Hand over the packet: the attempt ends there (escalating is not failing), so the
        block sends no `task.finished`."""
        self.escalated = self.run.escalate(self.task, packet, agent=self.agent)
        return self.escalated


class RunHandle:
    """A run of the fleet, as the orchestrator (or an agent) drives it."""

    def __init__(self, client: "Bulkhead", key: str) -> None:
        self.client = client
        self.key = key

    def __repr__(self) -> str:
        return f"RunHandle({self.key!r})"

    # Reads -----------------------------------------------------------------------------------

    def detail(self) -> RunOut:
        return self.client.run_detail(self.key)

    def frontier(self) -> FrontierOut:
        return self.client.frontier(self.key)

    def context(self, task: str) -> ContextOut:
        return self.client.context(self.key, task)

    def escalations(self) -> list[EscalationRow]:
        return self.client.escalations(self.key)

    # Events ----------------------------------------------------------------------------------

    def start(
        self,
        task: str,
        *,
        prompt_hash: str,
        context_hash: str,
        agent: str | None = None,
        consumes: Sequence[str] = (),
        refreshed: Sequence[str] = (),
    ) -> Accepted:
        """`task.started`; raises `Blocked` (with the typed blockers) if it may not start."""
        data = TaskStarted(
            run=self.key,
            task=task,
            agent=agent,
            attempt=Attempt(prompt_hash=prompt_hash, context_hash=context_hash),
            consumes=list(consumes),
            refreshed=list(refreshed),
        )
        return self.client.send("task.started", data)

    def finish(
        self,
        task: str,
        *,
        failure: Failure | None = None,
        agent: str | None = None,
        artifacts: Sequence[Artifact] = (),
        **kwargs: Any,
    ) -> Accepted:
        data = TaskFinished(
            run=self.key,
            task=task,
            agent=agent,
            outcome="failed" if failure else "succeeded",
            failure=failure,
            artifacts=list(artifacts),
            **kwargs,
        )
        return self.client.send("task.finished", data)

    @contextmanager
    def task(
        self,
        task: str,
        *,
        prompt_hash: str,
        context_hash: str,
        agent: str | None = None,
        consumes: Sequence[str] = (),
        refreshed: Sequence[str] = (),
    ) -> Iterator[TaskAttempt]:
        """An attempt: `task.started` on entry (`Blocked` if it may not start); on exit
        `task.finished` succeeded, or failed with the `TaskFailed` raised in the block (not
        re-raised), or with any other exception as an `error` (re-raised). An attempt that
        escalated (`attempt.escalate(packet)`) sends no `task.finished`."""
        started = self.start(
            task,
            prompt_hash=prompt_hash,
            context_hash=context_hash,
            agent=agent,
            consumes=consumes,
            refreshed=refreshed,
        )
        attempt = TaskAttempt(self, task, agent, int(started.get("attempt") or 0))
        try:
            yield attempt
        except TaskFailed as failed:
            if attempt.escalated is None:
                self.finish(task, failure=failed.failure, agent=agent, artifacts=attempt.artifacts)
            return
        except BaseException as exc:
            if attempt.escalated is None and isinstance(exc, Exception):
                failure = Failure(
                    kind="error", signature=type(exc).__name__, message=str(exc)[:5000]
                )
                self.finish(task, failure=failure, agent=agent, artifacts=attempt.artifacts)
            raise
        if attempt.escalated is None:
            self.finish(task, agent=agent, artifacts=attempt.artifacts)

    def claim(
        self,
        task: str,
        key: str,
        statement: str,
        *,
        evidence: Evidence | None = None,
        about: Sequence[str] = (),
        load_bearing: bool = True,
        agent: str | None = None,
    ) -> Accepted:
        """`claim.posted`. Its answer says `status` (unverified until a worker re-checks the
        evidence) and, when a consumer raised it, `load_bearing` and `raised`."""
        claim = Claim(
            key=key,
            statement=statement,
            load_bearing=load_bearing,
            about=list(about),
            evidence=evidence,
        )
        data = ClaimPosted(run=self.key, task=task, claim=claim, agent=agent)
        return self.client.send("claim.posted", data)

    def check(
        self, task: str, claim: str, verdict: str, evidence: Evidence, *, agent: str | None = None
    ) -> Accepted:
        """`claim.checked`: a consumer checked a claim against reality (re-checked by a worker)."""
        data = ClaimChecked.model_validate(
            {
                "run": self.key,
                "task": task,
                "claim": claim,
                "verdict": verdict,
                "evidence": evidence,
                "agent": agent,
            }
        )
        return self.client.send("claim.checked", data)

    def escalate(
        self, task: str, packet: Packet | Mapping[str, Any], *, agent: str | None = None
    ) -> Accepted:
        """`packet.submitted`; the answer's `escalation` is the escalation's id. After
        `packet.requested`, send only what the draft is missing."""
        content = packet.wire() if isinstance(packet, Packet) else dict(packet)
        data = PacketSubmitted(run=self.key, task=task, packet=content, agent=agent)
        return self.client.send("packet.submitted", data)

    # Waits -----------------------------------------------------------------------------------

    def wait_until(
        self,
        check: Callable[[RunOut], T | None],
        *,
        timeout: float = 60.0,
        interval: float = 0.5,
        what: str = "",
    ) -> T:
        """Poll the run until `check(run)` gives something truthy, and return it."""
        deadline = time.monotonic() + timeout
        while True:
            value = check(self.detail())
            if value:
                return value
            if time.monotonic() >= deadline:
                raise NoAnswer(f"waited {timeout:g} s for {what or 'the run'} in {self.key}")
            time.sleep(interval)

    def wait_for_escalation(self, task: str, *, timeout: float = 60.0) -> WaitingEscalation:
        """The task's waiting escalation, once it has one."""
        return self.wait_until(
            lambda run: run.task(task).escalation,
            timeout=timeout,
            what=f"an escalation of {task}",
        )

    def wait_for_answer(
        self,
        escalation: int,
        *,
        receiver: "CallbackReceiver | None" = None,
        timeout: float = 3600.0,
        interval: float = 1.0,
    ) -> AnswerOut:
        """The reviewer's answer: from `escalation.answered` at the receiver when one is given
        (it polls too, in case the callback is late), else by polling the escalation. Raises
        `PacketReturned` when a reviewer returned the packet, `NoAnswer` when it was closed
        without an answer or the wait ran out."""
        deadline = time.monotonic() + timeout
        while True:
            if receiver is not None:
                heard = receiver.answer_for(escalation)
                if heard is not None:
                    return heard
            found: EscalationOut = self.client.escalation(escalation)
            if found.answer is not None:
                return found.answer
            if found.status == "returned":
                raise PacketReturned(escalation, found.missing, found.note)
            if found.status == "closed":
                raise NoAnswer(
                    f"escalation {escalation} was closed without an answer: {found.reason}"
                )
            left = deadline - time.monotonic()
            if left <= 0:
                raise NoAnswer(f"no answer to escalation {escalation} within {timeout:g} s")
            if receiver is not None:
                receiver.wait_for_answer(escalation, min(interval, left))
            else:
                time.sleep(min(interval, left))
