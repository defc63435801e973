"""The policy lab: a scenario's outage under global halt, scoped and naive continuation. Pure.

Each step every policy executes its whole frontier, computed by the production `frontier` rule on
the declared graph. An evaluator that also knows the scenario's hidden dependencies (the ground
truth) judges every execution with the same rule: one whose true conditions are false, or whose
prerequisite was executed invalidly, is invalid. Invalid work goes unnoticed while the capability is
down; once it is back, reconciliation finds it and it is done again (rework).

`naive` ignores capabilities and barriers. It is an evaluator control, never a policy for a run:
if the evaluator does not flag its planted invalid executions, the lab cannot be trusted.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from runs.claims.hashing import canonical_json, sha256_hex
from runs.frontier import (
    CLAIM_STATUSES,
    CONFIDENCES,
    EFFECTS,
    ROLES,
    ClaimView,
    TaskNode,
    World,
    frontier,
)
from runs.graph import check_graph

LAB_POLICIES: Final = ("global_halt", "scoped", "naive")
KINDS: Final = ("independent", "all_blocked", "barrier", "naive_control", "annotation_fault")
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
    }
)
HIDDEN_FIELDS: Final = frozenset(
    {"prerequisites", "capabilities", "reads_state_of", "effect", "transaction"}
)
SCENARIO_FIELDS: Final = frozenset(
    {
        "domain",
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
    capability: str
    start: int
    steps: int

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

    @property
    def complete(self) -> bool:
        """Whether the declarations are the whole truth (no hidden dependency)."""
        return self.declared == self.truth


def load_scenario(data: object, *, name: str) -> Scenario:
    """A scenario from its parsed JSON; raises ScenarioError naming every problem."""
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
    expect = _expectation(data.get("expect"), declared, bool(data.get("hidden")), errors)
    for field_name in ("domain", "title"):
        if not isinstance(data.get(field_name), str) or not data.get(field_name):
            errors.append(f"{field_name}: required, a non-empty string")
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
    )


def simulate(scenario: Scenario, policy: str) -> dict[str, Any]:
    """One policy through the scenario: what it executed, when, and what the evaluator found."""
    if policy not in LAB_POLICIES:
        raise ValueError(f"unknown policy {policy!r} (one of {', '.join(LAB_POLICIES)})")
    outage = scenario.outage
    states = dict.fromkeys(scenario.declared, "pending")
    valid: dict[str, bool] = {}
    released: set[str] = set()
    executions: list[dict[str, Any]] = []
    held: dict[str, list[str]] = {}
    useful = rework = 0
    executed_during_outage = 0
    last_step = -1
    limit = outage.end + 4 * len(states) + 4
    step = 0
    completed = False
    while step <= limit:
        if step >= outage.end:
            # The capability is back: reconciliation finds the invalid work, a reviewer looks at
            # the stop boundaries that only a person can release.
            for key in sorted(k for k, ok in valid.items() if not ok):
                states[key] = "pending"
                del valid[key]
                rework += 1
            released = set(states)
        if all(ok for ok in valid.values()) and len(valid) == len(states):
            completed = True
            break
        during = outage.start <= step < outage.end
        down = frozenset({outage.capability}) if during else frozenset()
        declared = _as_of(scenario.declared, states, released)
        truth = _as_of(scenario.truth, states, released)
        if policy == "naive":
            ready = frontier(_naive(declared), World(claims=scenario.claims)).ready
        else:
            world = World(down=down, roles=scenario.roles, claims=scenario.claims, policy=policy)
            seen = frontier(declared, world)
            ready = seen.ready
            if step == outage.start:
                held = {key: list(seen.deferred[key]) for key in sorted(seen.deferred)}
        judge = frontier(truth, World(down=down, roles=scenario.roles, claims=scenario.claims))
        if not ready and step >= outage.end:
            break  # nothing can move and nothing will change: stuck
        outcomes = {}
        for key in ready:
            reasons = list(judge.deferred.get(key, ()))
            reasons += [
                f"tainted:{p}" for p in scenario.truth[key].prerequisites if valid.get(p) is False
            ]
            outcomes[key] = not reasons
            executions.append({"task": key, "step": step, "valid": not reasons, "reasons": reasons})
            if during:
                executed_during_outage += 1
                if not reasons:
                    useful += scenario.declared[key].weight
        for key, ok in outcomes.items():
            states[key] = "succeeded"
            valid[key] = ok
        if ready:
            last_step = step
        step += 1
    invalid = [e for e in executions if not e["valid"]]
    return {
        "useful": useful,
        "invalid": len(invalid),
        "rework": rework,
        "recovery_steps": max(0, last_step + 1 - outage.end),
        "completed": completed,
        "executed_during_outage": executed_during_outage,
        "invalid_executions": [
            {"task": e["task"], "step": e["step"], "reasons": e["reasons"]} for e in invalid
        ],
        "held_at_outage_start": held,
        "executions": [[e["task"], e["step"]] for e in executions],
    }


def run_scenario(scenario: Scenario) -> dict[str, Any]:
    policies = {}
    for policy in LAB_POLICIES:
        result = simulate(scenario, policy)
        policies[policy] = {**result, "hash": result_hash(result)}
    body = {
        "scenario": scenario.name,
        "domain": scenario.domain,
        "title": scenario.title,
        "kinds": list(scenario.expect.kinds),
        "complete_declarations": scenario.complete,
        "outage": {
            "capability": scenario.outage.capability,
            "start": scenario.outage.start,
            "steps": scenario.outage.steps,
        },
        "policies": policies,
    }
    return {**body, "hash": result_hash(body)}


def lab(scenarios: Iterable[Scenario]) -> dict[str, Any]:
    """Every scenario under every policy, the findings, and one hash of the whole result."""
    results = [run_scenario(s) for s in sorted(scenarios, key=lambda s: s.name)]
    body = {"scenarios": results, "findings": findings(results)}
    return {**body, "hash": result_hash(body)}


def result_hash(value: Any) -> str:
    """sha256 of the canonical JSON (keys sorted, separators "," and ":")."""
    return sha256_hex(canonical_json(value))


def verify(scenario: Scenario, result: Mapping[str, Any]) -> list[str]:
    """The predeclared checks that apply to this scenario; every failure, named."""
    failures: list[str] = []
    policies = result["policies"]
    scoped, halt = policies["scoped"], policies["global_halt"]
    name = scenario.name
    expected = {policy: set(tasks) for policy, tasks in scenario.expect.invalid.items()}
    # Whatever the scenario expects, naive's plainly invalid work must be caught.
    expected.setdefault("naive", set()).update(
        plainly_invalid(scenario, policies["naive"]["executions"])
    )
    for policy, tasks in sorted(expected.items()):
        flagged = {e["task"] for e in policies[policy]["invalid_executions"]}
        for task in sorted(tasks - flagged):
            failures.append(f"{name}: {policy}'s invalid execution of {task} went undetected")
    kinds = scenario.expect.kinds
    if "naive_control" in kinds and not policies["naive"]["invalid"]:
        failures.append(f"{name}: the planted naive control executed nothing invalid")
    if scenario.complete and scoped["invalid"]:
        crossed = ", ".join(sorted({e["task"] for e in scoped["invalid_executions"]}))
        failures.append(f"{name}: scoped executed invalid work on complete declarations: {crossed}")
    if "all_blocked" in kinds and scoped["executed_during_outage"]:
        failures.append(f"{name}: scoped did work while everything left was blocked")
    if "independent" in kinds and not scoped["useful"] > halt["useful"]:
        failures.append(
            f"{name}: scoped did not beat global halt ({scoped['useful']} vs {halt['useful']})"
        )
    if "barrier" in kinds:
        during = range(scenario.outage.start, scenario.outage.end)
        ran = {task for task, step in scoped["executions"] if step in during}
        for task, blocker in sorted(scenario.expect.held.items()):
            if blocker not in scoped["held_at_outage_start"].get(task, []):
                failures.append(f"{name}: scoped did not hold {task} with {blocker}")
            if task in ran:
                failures.append(f"{name}: scoped executed {task} across {blocker}")
    for policy in ("global_halt", "scoped"):
        if not policies[policy]["completed"]:
            failures.append(f"{name}: {policy} did not complete the run after restoration")
    return failures


def plainly_invalid(scenario: Scenario, executions: Iterable[Sequence[Any]]) -> set[str]:
    """Tasks executed while a condition the outage makes false held them, or on top of such work.

    An independent check of the evaluator, without the frontier rule or the scenario's `expect`:
    during the outage, a task that truly needs the capability (or reads its state), or an
    external effect while the capability is the fleet's authority, observability or rollback.
    A lower bound: the evaluator may find more (barriers, transactions, claims).
    """
    outage = scenario.outage
    guards_effects = outage.capability in scenario.roles.values()
    latest_invalid: dict[str, bool] = {}
    found: set[str] = set()
    for task, step in executions:
        node = scenario.truth[task]
        needs = (
            outage.capability in node.capabilities
            or outage.capability in node.reads_state_of
            or (node.effect == "external" and guards_effects)
        )
        invalid = (outage.start <= step < outage.end and needs) or any(
            latest_invalid.get(p, False) for p in node.prerequisites
        )
        latest_invalid[task] = invalid
        if invalid:
            found.add(task)
    return found


def verify_lab(scenarios: Sequence[Scenario], report: Mapping[str, Any]) -> list[str]:
    """Every scenario's checks, and that a second run gives the same result hash."""
    results = {result["scenario"]: result for result in report["scenarios"]}
    failures = [f for scenario in scenarios for f in verify(scenario, results[scenario.name])]
    again = lab(scenarios)["hash"]
    if again != report["hash"]:
        failures.append(f"two runs hashed differently: {report['hash']} and {again}")
    return failures


def findings(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the challenge plan asks to record: where global halt was safer or cheaper."""
    found = []
    for result in results:
        scoped, halt = result["policies"]["scoped"], result["policies"]["global_halt"]
        if (halt["invalid"], halt["rework"]) < (scoped["invalid"], scoped["rework"]):
            found.append(
                f"{result['scenario']}: global halt was safer ({halt['invalid']} invalid, "
                f"{halt['rework']} rework) than scoped ({scoped['invalid']} invalid, "
                f"{scoped['rework']} rework)"
            )
    return found


def table(report: Mapping[str, Any]) -> str:
    """The plain text table: one row per scenario and policy."""
    header = ("scenario", "policy", "useful", "invalid", "rework", "recovery", "hash")
    rows = [header]
    for result in report["scenarios"]:
        for policy in LAB_POLICIES:
            r = result["policies"][policy]
            rows.append(
                (
                    result["scenario"],
                    policy,
                    str(r["useful"]),
                    str(r["invalid"]),
                    str(r["rework"]),
                    str(r["recovery_steps"]),
                    r["hash"][:12],
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    right = {2, 3, 4, 5}
    lines = [
        "  ".join(
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    totals = {p: sum(r["policies"][p]["useful"] for r in report["scenarios"]) for p in LAB_POLICIES}
    invalid = {
        p: sum(r["policies"][p]["invalid"] for r in report["scenarios"]) for p in LAB_POLICIES
    }
    lines.append("")
    lines.append(
        "useful outage work: "
        + ", ".join(f"{p} {totals[p]}" for p in LAB_POLICIES)
        + "; invalid executions: "
        + ", ".join(f"{p} {invalid[p]}" for p in LAB_POLICIES)
    )
    lines += [f"finding: {line}" for line in report["findings"]]
    lines.append(f"result hash: {report['hash']}")
    return "\n".join(lines)


def _as_of(
    tasks: Mapping[str, TaskNode], states: Mapping[str, str], released: set[str]
) -> dict[str, TaskNode]:
    return {
        key: replace(node, state=states[key], released=node.released or key in released)
        for key, node in tasks.items()
    }


def _naive(nodes: Mapping[str, TaskNode]) -> dict[str, TaskNode]:
    """What naive continuation sees: prerequisites and claims, no capabilities, no barriers."""
    return {
        key: replace(
            node, capabilities=(), reads_state_of=(), effect="none", transaction=None, released=True
        )
        for key, node in nodes.items()
    }


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
    errors += [
        f"outage.{k}: unknown field" for k in sorted(set(value) - {"capability", "start", "steps"})
    ]
    capability, start, steps = value.get("capability"), value.get("start", 0), value.get("steps")
    if capability not in known:
        errors.append(f"outage.capability: {capability!r} is not a declared capability")
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        errors.append("outage.start: a step number, 0 or more")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        errors.append("outage.steps: a number of steps, 1 or more")
    if errors:
        return None
    assert isinstance(capability, str) and isinstance(start, int) and isinstance(steps, int)
    return Outage(capability=capability, start=start, steps=steps)


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
    value: object, declared: Mapping[str, TaskNode], hidden: bool, errors: list[str]
) -> Expectation:
    if value is None:
        return Expectation(kinds=())  # optional: DESIGN 5's own checks need no expectation
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
