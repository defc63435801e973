"""What the retry policy reads about a task's attempts: each attempt and how it failed. Pure."""

from dataclasses import dataclass
from typing import Final

FAILURE_KINDS: Final = ("transient", "reasoning", "spec", "environment", "error")
OUTCOMES: Final = ("succeeded", "failed")


@dataclass(frozen=True, slots=True)
class Failure:
    kind: str  # one of FAILURE_KINDS
    signature: str  # the agent's stable name for how it failed; equal means "the same way"
    message: str = ""  # what the agent said about it, for the reviewer
    capability: str | None = None  # the capability a transient failure names (feeds the breaker)

    def __post_init__(self) -> None:
        if self.kind not in FAILURE_KINDS:
            raise ValueError(f"unknown failure kind {self.kind!r}")


@dataclass(frozen=True, slots=True)
class AttemptView:
    number: int  # 1 for the task's first attempt
    agent: str  # who ran it: an agent's name, or "tool:<name>" for a deterministic tool
    prompt_hash: str  # the attempt's prompt, as reported in task.started
    context_hash: str  # the context it was given, as reported in task.started
    outcome: str | None  # "succeeded" | "failed" | None (running)
    failure: Failure | None = None  # what a failed attempt reported
    reframed: bool = False  # this attempt was a reframe (ground truth and a narrower scope)
    rerouted: bool = False  # this attempt was a reroute (another agent or a tool)
    resumed: bool = False  # this attempt was the Resume of the attempt before it
    background_killed: tuple[str, ...] = ()  # task names of background work that was killed
    resumable: bool = False  # its session can be resumed (the agent said so in task.finished)

    def __post_init__(self) -> None:
        if self.outcome is not None and self.outcome not in OUTCOMES:
            raise ValueError(f"attempt {self.number}: unknown outcome {self.outcome!r}")
