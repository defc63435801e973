"""The policy lab's scenarios: a scenario file's JSON read into a `Scenario`. Pure."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from runs.frontier import CLAIM_STATUSES, CONFIDENCES, EFFECTS, ROLES, ClaimView, TaskNode
from runs.graph import check_graph

LAB_POLICIES: Final = ("global_halt", "scoped", "naive")
# An outage's start and length, in steps: a run takes as many steps as it has tasks at most, and
# the simulation walks every step of the outage (a billion of them would never end).
MAX_STEPS: Final = 10_000
KINDS: Final = ("independent", "all_blocked", "barrier", "naive_control", "annotation_fault")
# A scenario's category: the kind of case it is in the study's design (a naive control is a
# kind a case of any category can also be).
CATEGORIES: Final = ("independent", "all_blocked", "barrier", "annotation_fault")
# The study's four domains. A fleet's own runs (`--from-runs`) are their own domain: the fleet.
DOMAINS: Final = ("software_factory", "sre", "customer_support", "research_operations")
# The category a fleet's own runs get: an outage it actually saw, not a predeclared case.
OBSERVED: Final = "observed"
TASK_FIELDS: Final = frozenset(
    {
        "key",
        "title",
        "prerequisites",
        "capabilities",
        "reads_state_of",
        "effect",
        "dependency_confidence",
        "transaction",
        "consumes",
        "weight",
        "released",
        "state",
    }
)
# The state a scenario's task may start in: done before the outage, or not to be done.
START_STATES: Final = ("pending", "succeeded", "cancelled")
HIDDEN_FIELDS: Final = frozenset(
    {"prerequisites", "capabilities", "reads_state_of", "effect", "transaction"}
)
SCENARIO_FIELDS: Final = frozenset(
    {
        "domain",
        "category",
        "title",
        "description",
        "capabilities",
        "roles",
        "outage",
        "tasks",
        "hidden",
        "claims",
        "expect",
    }
)


class ScenarioError(ValueError):
    """A scenario file that does not describe a scenario; names every bad field."""

    def __init__(self, name: str, errors: Sequence[str]) -> None:
        self.errors = list(errors)
        super().__init__(f"{name}: " + "; ".join(errors))


@dataclass(frozen=True)
class Outage:
    capabilities: tuple[str, ...]  # down together, back together
    start: int
    steps: int

    @property
    def capability(self) -> str:
        """The capabilities, named as one (a scenario file's outage has one)."""
        return ", ".join(self.capabilities)

    @property
    def end(self) -> int:
        """The first step with the capability back (restoration)."""
        return self.start + self.steps


@dataclass(frozen=True)
class Expectation:
    kinds: tuple[str, ...]
    held: Mapping[str, str] = field(default_factory=dict)  # task -> blocker, under scoped
    invalid: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # policy -> tasks


@dataclass(frozen=True)
class Scenario:
    name: str
    domain: str
    title: str
    declared: Mapping[str, TaskNode]
    truth: Mapping[str, TaskNode]  # declared plus hidden dependencies
    roles: Mapping[str, str]
    outage: Outage
    claims: Mapping[str, ClaimView]
    expect: Expectation
    category: str = OBSERVED  # one of CATEGORIES for a scenario file

    @property
    def kinds(self) -> frozenset[str]:
        """What the scenario is checked as: its category and its expected kinds."""
        return frozenset({self.category, *self.expect.kinds}) & frozenset(KINDS)

    @property
    def complete(self) -> bool:
        """Whether the declarations are the whole truth (no hidden dependency)."""
        return self.declared == self.truth


def load_scenario(data: object, *, name: str, observed: bool = False) -> Scenario:
    """A scenario from its parsed JSON; raises ScenarioError naming every problem.

    `observed`: a fleet's own run, not a study case: its domain is the fleet and its category
    `observed`.
    """
    errors: list[str] = []
    if not isinstance(data, dict):
        raise ScenarioError(name, ["the file must hold a JSON object"])
    errors += [f"{key}: unknown field" for key in sorted(set(data) - SCENARIO_FIELDS)]
    capabilities = _strings(data.get("capabilities"), "capabilities", errors)
    known = set(capabilities)
    roles = data.get("roles", {})
    if not isinstance(roles, dict):
        errors.append("roles: must be an object of role -> capability")
        roles = {}
    for role, capability in sorted(roles.items()):
        if role not in ROLES:
            errors.append(f"roles.{role}: unknown role (one of {', '.join(ROLES)})")
        if capability not in known:
            errors.append(f"roles.{role}: {capability!r} is not a declared capability")
    outage = _outage(data.get("outage"), known, errors)
    declared = _tasks(data.get("tasks"), known, errors)
    truth = _hidden(data.get("hidden", {}), declared, known, errors)
    claims = _claims(data.get("claims", {}), errors)
    category = data.get("category")
    expect = _expectation(
        data.get("expect"), declared, bool(data.get("hidden")), errors, category=category
    )
    for field_name in ("domain", "title"):
        if not isinstance(data.get(field_name), str) or not data.get(field_name):
            errors.append(f"{field_name}: required, a non-empty string")
    domain = data.get("domain")
    if not observed and isinstance(domain, str) and domain and domain not in DOMAINS:
        errors.append(f"domain: one of {', '.join(DOMAINS)}")
    if observed and category != OBSERVED:
        errors.append(f"category: {OBSERVED!r} for a fleet's own run")
    elif not observed and category not in CATEGORIES:
        errors.append(f"category: required, one of {', '.join(CATEGORIES)}")

    if errors:
        raise ScenarioError(name, errors)
    assert outage is not None
    return Scenario(
        name=name,
        domain=data["domain"],
        title=data["title"],
        declared=declared,
        truth=truth,
        roles=dict(roles),
        outage=outage,
        claims=claims,
        expect=expect,
        category=str(category),
    )


def _strings(value: object, where: str, errors: list[str]) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        errors.append(f"{where}: must be a list of non-empty strings")
        return ()
    if len(set(value)) != len(value):
        errors.append(f"{where}: duplicate entries")
    return tuple(value)


def _outage(value: object, known: set[str], errors: list[str]) -> Outage | None:
    if not isinstance(value, dict):
        errors.append("outage: required, {capability, start, steps}")
        return None
    allowed = {"capability", "capabilities", "start", "steps"}
    errors += [f"outage.{k}: unknown field" for k in sorted(set(value) - allowed)]
    start, steps = value.get("start", 0), value.get("steps")
    if "capabilities" in value:  # several down together
        names: list[object] = list(_strings(value["capabilities"], "outage.capabilities", errors))
        if not names:
            errors.append("outage.capabilities: at least one capability")
        where = "outage.capabilities"
    else:
        names = [value.get("capability")]
        where = "outage.capability"
    for capability in names:
        if not isinstance(capability, str) or capability not in known:
            errors.append(f"{where}: {capability!r} is not a declared capability")
    if not isinstance(start, int) or isinstance(start, bool) or not 0 <= start <= MAX_STEPS:
        errors.append(f"outage.start: a whole step number, 0 to {MAX_STEPS:,}")
    if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= MAX_STEPS:
        errors.append(f"outage.steps: a whole number of steps, 1 to {MAX_STEPS:,}")
    if errors:
        return None
    assert isinstance(start, int) and isinstance(steps, int)
    return Outage(capabilities=tuple(str(n) for n in names), start=start, steps=steps)


def _tasks(value: object, known: set[str], errors: list[str]) -> dict[str, TaskNode]:
    if not isinstance(value, list) or not value:
        errors.append("tasks: required, a non-empty list")
        return {}
    nodes: dict[str, TaskNode] = {}
    for i, task in enumerate(value):
        where = f"tasks.{i}"
        if not isinstance(task, dict) or not isinstance(task.get("key"), str) or not task["key"]:
            errors.append(f"{where}.key: required, a non-empty string")
            continue
        if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in task["key"]):
            errors.append(f"{where}.key: must not contain control characters")
            continue
        errors += [f"{where}.{k}: unknown field" for k in sorted(set(task) - TASK_FIELDS)]
        node = _node(task, where, known, errors)
        if node is not None:
            nodes[node.key] = node
    graph = [(str(t.get("key")), t.get("prerequisites", [])) for t in value if isinstance(t, dict)]
    if not errors:
        errors += [f"{e.loc}: {e.msg}" for e in check_graph(graph, loc="tasks")]
    return nodes


def _node(task: dict[str, Any], where: str, known: set[str], errors: list[str]) -> TaskNode | None:
    before = len(errors)
    lists = {
        name: _strings(task.get(name), f"{where}.{name}", errors)
        for name in ("prerequisites", "capabilities", "reads_state_of", "consumes")
    }
    for name in ("capabilities", "reads_state_of"):
        for capability in lists[name]:
            if capability not in known:
                errors.append(f"{where}.{name}: {capability!r} is not a declared capability")
    effect = task.get("effect", "none")
    if effect not in EFFECTS:
        errors.append(f"{where}.effect: one of {', '.join(EFFECTS)}")
    confidence = task.get("dependency_confidence", "declared")
    if confidence not in CONFIDENCES:
        errors.append(f"{where}.dependency_confidence: one of {', '.join(CONFIDENCES)}")
    transaction = task.get("transaction")
    if transaction is not None and (not isinstance(transaction, str) or not transaction):
        errors.append(f"{where}.transaction: a non-empty string")
    weight = task.get("weight", 1)
    if not isinstance(weight, int) or isinstance(weight, bool) or weight < 0:
        errors.append(f"{where}.weight: a whole number, 0 or more")
    released = task.get("released", False)
    if not isinstance(released, bool):
        errors.append(f"{where}.released: true or false")
    state = task.get("state", "pending")
    if state not in START_STATES:
        errors.append(f"{where}.state: one of {', '.join(START_STATES)}")
    if len(errors) > before:
        return None
    return TaskNode(
        key=task["key"],
        prerequisites=lists["prerequisites"],
        capabilities=lists["capabilities"],
        reads_state_of=lists["reads_state_of"],
        effect=effect,
        dependency_confidence=confidence,
        transaction=transaction,
        consumes=lists["consumes"],
        weight=weight,
        released=released,
        state=state,
    )


def _hidden(
    value: object, declared: Mapping[str, TaskNode], known: set[str], errors: list[str]
) -> dict[str, TaskNode]:
    """The ground truth: the declared tasks with the hidden dependencies added."""
    truth = dict(declared)
    if not isinstance(value, dict):
        errors.append("hidden: must be an object of task -> hidden dependencies")
        return truth
    for key, extra in sorted(value.items()):
        where = f"hidden.{key}"
        if key not in declared:
            errors.append(f"{where}: unknown task")
            continue
        if not isinstance(extra, dict) or not extra:
            errors.append(f"{where}: must be a non-empty object")
            continue
        errors += [f"{where}.{k}: unknown field" for k in sorted(set(extra) - HIDDEN_FIELDS)]
        node = declared[key]
        lists = {
            name: _strings(extra.get(name), f"{where}.{name}", errors)
            for name in ("prerequisites", "capabilities", "reads_state_of")
        }
        for prerequisite in lists["prerequisites"]:
            if prerequisite not in declared or prerequisite == key:
                errors.append(f"{where}.prerequisites: {prerequisite!r} is not another task")
        for name in ("capabilities", "reads_state_of"):
            errors += [
                f"{where}.{name}: {c!r} is not a declared capability"
                for c in lists[name]
                if c not in known
            ]
        effect = extra.get("effect", node.effect)
        if effect not in EFFECTS:
            errors.append(f"{where}.effect: one of {', '.join(EFFECTS)}")
            effect = node.effect
        transaction = extra.get("transaction", node.transaction)
        truth[key] = replace(
            node,
            prerequisites=tuple(dict.fromkeys((*node.prerequisites, *lists["prerequisites"]))),
            capabilities=tuple(dict.fromkeys((*node.capabilities, *lists["capabilities"]))),
            reads_state_of=tuple(dict.fromkeys((*node.reads_state_of, *lists["reads_state_of"]))),
            effect=effect,
            transaction=transaction,
        )
    if not errors:
        graph = [(key, node.prerequisites) for key, node in truth.items()]
        errors += [f"hidden: {e.msg}" for e in check_graph(graph, loc="hidden")]
    return truth


def _claims(value: object, errors: list[str]) -> dict[str, ClaimView]:
    if not isinstance(value, dict):
        errors.append("claims: must be an object of claim key -> {status, load_bearing}")
        return {}
    claims = {}
    for key, claim in sorted(value.items()):
        if (
            not isinstance(claim, dict)
            or claim.get("status") not in CLAIM_STATUSES
            or not isinstance(claim.get("load_bearing", True), bool)
        ):
            errors.append(f"claims.{key}: {{status: unverified|verified|refuted, load_bearing}}")
            continue
        claims[key] = ClaimView(claim["status"], claim.get("load_bearing", True))
    return claims


def _expectation(
    value: object,
    declared: Mapping[str, TaskNode],
    hidden: bool,
    errors: list[str],
    *,
    category: object = None,
) -> Expectation:
    if value is None:
        value = {"kinds": [category]} if category in CATEGORIES else None
    if value is None:
        return Expectation(kinds=())  # optional: the frontier's own checks need no expectation
    if not isinstance(value, dict):
        errors.append("expect: an object {kinds, held?, invalid?}")
        return Expectation(kinds=())
    errors += [
        f"expect.{k}: unknown field" for k in sorted(set(value) - {"kinds", "held", "invalid"})
    ]
    kinds = _strings(value.get("kinds"), "expect.kinds", errors)
    if not kinds:
        errors.append(f"expect.kinds: at least one of {', '.join(KINDS)}")
    errors += [f"expect.kinds: unknown kind {k!r}" for k in kinds if k not in KINDS]
    held = value.get("held", {})
    if not isinstance(held, dict) or not all(isinstance(v, str) for v in held.values()):
        errors.append("expect.held: an object of task -> blocker")
        held = {}
    errors += [f"expect.held.{k}: unknown task" for k in sorted(held) if k not in declared]
    invalid_value = value.get("invalid", {})
    invalid: dict[str, tuple[str, ...]] = {}
    if not isinstance(invalid_value, dict):
        errors.append("expect.invalid: an object of policy -> tasks")
        invalid_value = {}
    for policy, tasks in sorted(invalid_value.items()):
        if policy not in LAB_POLICIES:
            errors.append(f"expect.invalid.{policy}: unknown policy")
        invalid[policy] = _strings(tasks, f"expect.invalid.{policy}", errors)
        errors += [
            f"expect.invalid.{policy}: unknown task {t!r}"
            for t in invalid[policy]
            if t not in declared
        ]
    if category in CATEGORIES and category not in kinds:
        kinds = (*kinds, str(category))  # the category is checked as its kind
    if "barrier" in kinds and not held:
        errors.append("expect.held: a barrier case names the tasks scoped must hold")
    if "naive_control" in kinds and not invalid.get("naive"):
        errors.append("expect.invalid.naive: a naive control names its planted invalid tasks")
    if "annotation_fault" in kinds:
        if not hidden:
            errors.append("hidden: an annotation-fault case hides at least one dependency")
        if not invalid.get("scoped"):
            errors.append("expect.invalid.scoped: an annotation fault names what scoped crosses")
    return Expectation(kinds=kinds, held=dict(held), invalid=invalid)
