"""The policy lab's report: the predeclared checks of each scenario, the findings, the table. Pure."""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from runs.simulation_scenarios import CATEGORIES, DOMAINS, LAB_POLICIES, OBSERVED, Scenario

# The study's corpus minimums: category -> cases. Besides: a planted naive control, and an
# annotation fault (a hidden dependency) in each of the four domains.
MINIMUMS: Final = {"independent": 4, "all_blocked": 4, "barrier": 4}
CATEGORY_NAMES: Final = {
    "independent": "independent-safe-work",
    "all_blocked": "all-blocked",
    "barrier": "barrier",
    "annotation_fault": "annotation-fault",
}
# The measures summed over a corpus, per policy, in the order the table prints them.
SUMMED: Final = (
    "useful",
    "useful_tasks",
    "invalid",
    "declared_violations",
    "rework",
    "completed_after_restoration",
    "recovery_steps",
    "localized_blockers",
    "run_wide_blockers",
)


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
    kinds = scenario.kinds
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
    down = set(outage.capabilities)
    guards_effects = bool(down & set(scenario.roles.values()))
    latest_invalid: dict[str, bool] = {}
    found: set[str] = set()
    for task, step in executions:
        node = scenario.truth[task]
        needs = bool(down & {*node.capabilities, *node.reads_state_of}) or (
            node.effect == "external" and guards_effects
        )
        invalid = (outage.start <= step < outage.end and needs) or any(
            latest_invalid.get(p, False) for p in node.prerequisites
        )
        latest_invalid[task] = invalid
        if invalid:
            found.add(task)
    return found


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


def corpus_shortfalls(scenarios: Sequence[Scenario]) -> list[str]:
    """What the corpus lacks of the study's minimums, each named; empty when it has them all."""
    counts = {c: sum(1 for s in scenarios if s.category == c) for c in CATEGORIES}
    failures = [
        f"corpus: {counts[c]} {CATEGORY_NAMES[c]} case(s), the study needs at least {least}"
        for c, least in MINIMUMS.items()
        if counts[c] < least
    ]
    if not any("naive_control" in s.kinds and s.expect.invalid.get("naive") for s in scenarios):
        failures.append("corpus: no planted naive control, the study needs at least 1")
    for domain in DOMAINS:
        if not any(s.domain == domain and "annotation_fault" in s.kinds for s in scenarios):
            failures.append(
                f"corpus: no hidden dependency (annotation fault) in the {domain} domain"
            )
    return failures


def measures(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The primary and secondary measures over the corpus, per policy; and the cases where
    scoped correctly made no progress (nothing safe was left during the outage)."""
    per_policy = {
        p: {
            **{m: sum(int(r["policies"][p][m]) for r in results) for m in SUMMED},
            "checkpoint_kept": sum(1 for r in results if r["policies"][p]["checkpoint_kept"]),
            "completed": sum(1 for r in results if r["policies"][p]["completed"]),
        }
        for p in LAB_POLICIES
    }
    return {
        "scenarios": len(results),
        "policies": per_policy,
        "scoped_correctly_no_progress": [
            r["scenario"] for r in results if r["scoped_no_progress"] == "correct"
        ],
        "scoped_missed_progress": [
            r["scenario"] for r in results if (r["scoped_no_progress"] or "").startswith("missed")
        ],
    }


def support_verdict(
    scenarios: Sequence[Scenario], results: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The study's support criterion for scoped continuation, with the cases that decide it.

    Supported only if scoped does strictly more useful outage work than global halt in at least
    one predeclared beneficial (independent) case, never executes a task whose declared
    conditions are false, and halts in every predeclared safety-boundary case (all-blocked:
    nothing done; barrier: every held task held). One violation of the last two challenges it.
    """
    beneficial, violations, boundaries = [], [], []
    held = {s.name: s.expect.held for s in scenarios}
    for r in results:
        scoped, halt = r["policies"]["scoped"], r["policies"]["global_halt"]
        name = r["scenario"]
        if "independent" in r["kinds"] and scoped["useful"] > halt["useful"]:
            beneficial.append(f"{name}: scoped {scoped['useful']} vs global halt {halt['useful']}")
        if scoped["declared_violations"]:
            violations.append(
                f"{name}: scoped executed {scoped['declared_violations']} task(s) whose "
                "declared conditions were false"
            )
        if "all_blocked" in r["kinds"] or "barrier" in r["kinds"]:
            crossed = _crossed_boundaries(r, held.get(r["scenario"], {}))
            if crossed:
                violations.append(f"{name}: scoped did not halt at {crossed}")
            else:
                boundaries.append(name)
    if not beneficial:
        violations.append("no beneficial case where scoped did more useful outage work")
    supported = not violations
    return {
        "verdict": "supported" if supported else "challenged",
        "beneficial": beneficial,
        "safety_boundaries_held": boundaries,
        "violations": violations,
    }


def _crossed_boundaries(result: Mapping[str, Any], held: Mapping[str, str]) -> str:
    """The safety boundaries scoped did not halt at, named; empty when it halted at all."""
    scoped = result["policies"]["scoped"]
    crossed = []
    if "all_blocked" in result["kinds"] and scoped["executed_during_outage"]:
        crossed.append("an all-blocked outage (it did work)")
    start = result["outage"]["start"]
    during = range(start, start + result["outage"]["steps"])
    ran = {task for task, step in scoped["executions"] if step in during}
    for task, blocker in sorted(held.items()):
        if task in ran or blocker not in scoped["held_at_outage_start"].get(task, []):
            crossed.append(f"{task} ({blocker})")
    return ", ".join(crossed)


def challenge_verdict(
    scenarios: Sequence[Scenario], results: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The annotation-fault challenge: with a real dependency hidden from the scheduler, scoped
    crosses it and the evaluator catches it, in every one of the four domains (the counterexample
    the study predicts for scoped continuation on incomplete declarations)."""
    by_name = {r["scenario"]: r for r in results}
    caught: dict[str, list[str]] = {}
    for scenario in scenarios:
        if "annotation_fault" not in scenario.kinds:
            continue
        flagged = {
            e["task"] for e in by_name[scenario.name]["policies"]["scoped"]["invalid_executions"]
        }
        planted = set(scenario.expect.invalid.get("scoped", ()))
        if planted and planted <= flagged:
            caught.setdefault(scenario.domain, []).append(
                f"{scenario.name}: {', '.join(sorted(planted))}"
            )
    missing = [d for d in DOMAINS if d not in caught]
    return {
        "verdict": "caught in all four domains" if not missing else "not caught in every domain",
        "caught": {d: caught[d] for d in sorted(caught)},
        "missing": missing,
    }


COLUMNS: Final = (
    ("useful", "useful"),
    ("invalid", "invalid"),
    ("rework", "rework"),
    ("after", "completed_after_restoration"),
    ("recovery", "recovery_steps"),
    ("local", "localized_blockers"),
    ("wide", "run_wide_blockers"),
)


def table(report: Mapping[str, Any]) -> str:
    """The plain text table: one row per scenario and policy, then the measures over the corpus,
    the findings, the two verdicts and the result hash."""
    header = ("scenario", "policy", *(name for name, _ in COLUMNS), "ckpt", "hash")
    rows = [header]
    for result in report["scenarios"]:
        for policy in LAB_POLICIES:
            r = result["policies"][policy]
            rows.append(
                (
                    result["scenario"],
                    policy,
                    *(str(r[measure]) for _, measure in COLUMNS),
                    "kept" if r["checkpoint_kept"] else "no",
                    r["hash"][:12],
                )
            )
    lines = _aligned(rows, right=set(range(2, 2 + len(COLUMNS))))
    lines.append("")
    lines += _totals(report["measures"])
    lines += [f"finding: {line}" for line in report["findings"]]
    lines += verdict_lines(report)
    lines.append(f"result hash: {report['hash']}")
    return "\n".join(lines)


def verdict_lines(report: Mapping[str, Any]) -> list[str]:
    """The support and challenge verdicts, each with the cases that decide it."""
    if all(r["category"] == OBSERVED for r in report["scenarios"]):
        # A fleet's own runs: no predeclared cases to judge, only what each policy did for it.
        m = report["measures"]["policies"]
        return [
            f"your runs: over {len(report['scenarios'])} outage(s) they saw, scoped did "
            f"{m['scoped']['useful']} useful outage work ({m['scoped']['invalid']} invalid), "
            f"global halt {m['global_halt']['useful']} ({m['global_halt']['invalid']} invalid)"
        ]
    support, challenge = report["support"], report["challenge"]
    lines = [f"support: {support['verdict']}"]
    lines += [f"  beneficial: {case}" for case in support["beneficial"]]
    if support["safety_boundaries_held"]:
        lines.append(
            f"  halted at every safety boundary ({len(support['safety_boundaries_held'])} "
            "cases): " + ", ".join(support["safety_boundaries_held"])
        )
    lines += [f"  violation: {case}" for case in support["violations"]]
    lines.append(f"challenge: {challenge['verdict']}")
    lines += [
        f"  {domain}: scoped crossed a hidden boundary, caught: {'; '.join(cases)}"
        for domain, cases in challenge["caught"].items()
    ]
    lines += [f"  {domain}: not caught" for domain in challenge["missing"]]
    return lines


def _totals(measures: Mapping[str, Any]) -> list[str]:
    header = ("policy", *(name for name, _ in COLUMNS), "decl-viol", "ckpt", "completed")
    n = measures["scenarios"]
    rows = [header]
    for policy in LAB_POLICIES:
        m = measures["policies"][policy]
        rows.append(
            (
                policy,
                *(str(m[measure]) for _, measure in COLUMNS),
                str(m["declared_violations"]),
                f"{m['checkpoint_kept']}/{n}",
                f"{m['completed']}/{n}",
            )
        )
    lines = [f"over {n} scenarios:"]
    lines += _aligned(rows, right=set(range(1, len(header))))
    idle = measures["scoped_correctly_no_progress"]
    lines.append(f"scoped correctly made no progress ({len(idle)}): " + (", ".join(idle) or "none"))
    if measures["scoped_missed_progress"]:
        lines.append(
            "scoped made no progress though work was safe: "
            + ", ".join(measures["scoped_missed_progress"])
        )
    return lines


def _aligned(rows: Sequence[Sequence[str]], *, right: set[int]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines
