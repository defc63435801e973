"""The frontier's plain data: the tasks of a run, the world around them, and the result. Pure."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

TASK_STATES: Final = ("pending", "running", "succeeded", "failed", "escalated", "cancelled")
EFFECTS: Final = ("none", "reversible", "external")
CONFIDENCES: Final = ("declared", "uncertain")
POLICIES: Final = ("scoped", "global_halt")
ROLES: Final = ("authority", "observability", "rollback")
CLAIM_STATUSES: Final = ("unverified", "verified", "refuted")

# Same as Task.UNFINISHED: the states whose needs hold a global halt.
UNFINISHED: Final = frozenset({"pending", "running", "escalated"})
# A prerequisite in one of these states will not succeed without someone acting: it blocks.
STOPPED: Final = frozenset({"failed", "escalated", "cancelled"})

PREREQUISITE: Final = "prerequisite:"
TRANSACTION: Final = "barrier:transaction"


@dataclass(frozen=True, slots=True)
class TaskNode:
    key: str
    state: str = "pending"
    prerequisites: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()
    reads_state_of: tuple[str, ...] = ()
    effect: str = "none"
    dependency_confidence: str = "declared"
    transaction: str | None = None
    consumes: tuple[str, ...] = ()  # claims it names (declared, or on task.started)
    weight: int = 1
    released: bool = False  # a reviewer released its uncertain-dependency stop boundary
    # It declared no `consumes`: it also consumes the claims of every task it depends on.
    implicit: bool = False
    checks: tuple[str, ...] = ()  # claims it exists to check: they never block it
    halted_on: tuple[str, ...] = ()  # claims refuted while it was running on them, unsettled

    def __post_init__(self) -> None:
        if self.state not in TASK_STATES:
            raise ValueError(f"task {self.key!r}: unknown state {self.state!r}")
        if self.effect not in EFFECTS:
            raise ValueError(f"task {self.key!r}: unknown effect {self.effect!r}")
        if self.dependency_confidence not in CONFIDENCES:
            raise ValueError(
                f"task {self.key!r}: unknown dependency confidence {self.dependency_confidence!r}"
            )


@dataclass(frozen=True, slots=True)
class ClaimView:
    status: str  # unverified|verified|refuted
    load_bearing: bool
    # The task that posted it: the tasks that depend on it consume it implicitly. None for a
    # claim nothing consumes implicitly (one a reviewer's answer superseded).
    producer: str | None = None


@dataclass(frozen=True)
class World:
    """The facts outside the graph: capabilities down or unknown, the fleet's roles, claims,
    escalations.

    `unknown` capabilities were never reported on: not up, so an external effect that needs one
    waits, while reads and reversible work go on. `stop_unnamed_roles` is the fleet's setting
    that holds every external effect at the uncertain-dependency stop while one of `ROLES` is
    not named in `roles`.
    """

    down: frozenset[str] = frozenset()
    roles: Mapping[str, str] = field(default_factory=dict)  # role -> capability name
    claims: Mapping[str, ClaimView] = field(default_factory=dict)
    escalations: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # task -> open ids
    policy: str = "scoped"
    unknown: frozenset[str] = frozenset()
    stop_unnamed_roles: bool = False

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r} (one of {', '.join(POLICIES)})")

    @property
    def unnamed_roles(self) -> tuple[str, ...]:
        """The roles the fleet names no capability for, in `ROLES` order."""
        return tuple(role for role in ROLES if not self.roles.get(role))


@dataclass(frozen=True)
class Frontier:
    policy: str
    ready: tuple[str, ...]
    deferred: dict[str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class GraphIndex:
    """The structure of a run, built once and reused by `recompute` and `touched_by_capability`.

    It depends only on the tasks' keys, prerequisites, transactions, capabilities, state reads and
    effects, so it stays valid while states, claims, escalations and the world change; rebuild it
    when tasks are added to the run.
    """

    dependants: Mapping[str, tuple[str, ...]]
    groups: Mapping[str, tuple[str, ...]]  # transaction -> its members
    needs: Mapping[str, tuple[str, ...]]  # capability -> tasks requiring it or reading its state
    external: tuple[str, ...]  # tasks with an external effect
    # The members of transaction groups and every task above one of them: only a change among
    # these can bar a group, so a change's reach stops at a task outside it.
    feeds_groups: frozenset[str] = frozenset()
