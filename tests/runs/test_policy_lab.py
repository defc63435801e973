"""The policy lab's whole evaluation: categories, measures, verdicts and the corpus minimums."""

import copy
import json
import shutil
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from runs import simulation
from runs.simulation import ScenarioError, lab, load_scenario, simulate
from tests.runs.test_simulation import CORPUS, corpus, scenario


def copy_of_corpus(tmp_path: Path) -> Path:
    target = tmp_path / "scenarios"
    shutil.copytree(CORPUS[0].parent, target)
    return target


def verify_dir(directory: Path) -> str:
    out = StringIO()
    call_command("policy_lab", *map(str, sorted(directory.glob("*.json"))), "--verify", stdout=out)
    return out.getvalue()


def test_it_reports_the_secondary_measures_per_policy() -> None:
    case = load_scenario(scenario(), name="forge")
    halt, scoped, naive = (simulate(case, p) for p in ("global_halt", "scoped", "naive"))

    # Global halt holds every task with a run-wide blocker; scoped only what the forge cuts.
    assert (halt["localized_blockers"], halt["run_wide_blockers"]) == (0, 4)
    assert (scoped["localized_blockers"], scoped["run_wide_blockers"]) == (2, 0)
    assert scoped["useful_tasks"] == 2
    # After restoration: halt does all four, scoped the two the forge held; naive the release,
    # and its invalid push again, counted as rework apart from the completions.
    assert halt["completed_after_restoration"] == 4
    assert scoped["completed_after_restoration"] == 2
    assert naive["completed_after_restoration"] == 1
    assert naive["rework"] == naive["invalid"] == 1
    assert (halt["checkpoint_kept"], scoped["checkpoint_kept"], naive["checkpoint_kept"]) == (
        True,
        True,
        False,
    )
    assert (scoped["declared_violations"], naive["declared_violations"]) == (0, 1)


def test_it_names_the_cases_where_scoped_correctly_made_no_progress() -> None:
    blocked = load_scenario(
        scenario(
            category="all_blocked",
            tasks=[{"key": "push", "capabilities": ["forge"]}],
            expect={"kinds": ["all_blocked"]},
        ),
        name="blocked",
    )
    report = lab([blocked, load_scenario(scenario(), name="forge")])

    assert report["scenarios"][0]["scoped_no_progress"] == "correct"
    assert report["scenarios"][1]["scoped_no_progress"] is None
    assert report["measures"]["scoped_correctly_no_progress"] == ["blocked"]
    assert "scoped correctly made no progress (1): blocked" in simulation.table(report)


def test_the_corpus_supports_scoped_and_the_challenge_catches_every_domain() -> None:
    report = lab(corpus())

    assert report["support"]["verdict"] == "supported"
    assert len(report["support"]["beneficial"]) == 4
    assert len(report["support"]["safety_boundaries_held"]) == 12
    assert report["support"]["violations"] == []
    assert report["challenge"]["verdict"] == "caught in all four domains"
    assert set(report["challenge"]["caught"]) == set(simulation.DOMAINS)
    assert report["challenge"]["missing"] == []


def test_one_declared_violation_challenges_the_support_naming_the_case() -> None:
    scenarios = corpus()
    results = copy.deepcopy(lab(scenarios)["scenarios"])
    results[0]["policies"]["scoped"]["declared_violations"] = 1

    verdict = simulation.support_verdict(scenarios, results)

    assert verdict["verdict"] == "challenged"
    assert verdict["violations"] == [
        f"{results[0]['scenario']}: scoped executed 1 task(s) whose declared conditions were false"
    ]


def test_a_crossed_safety_boundary_challenges_the_support() -> None:
    scenarios = corpus()
    results = copy.deepcopy(lab(scenarios)["scenarios"])
    authority = next(r for r in results if r["scenario"] == "sre-change-control-authority")
    authority["policies"]["scoped"]["executions"].append(["scale-out-cluster", 0])

    verdict = simulation.support_verdict(scenarios, results)

    assert verdict["verdict"] == "challenged"
    assert (
        "sre-change-control-authority: scoped did not halt at scale-out-cluster "
        "(barrier:authority)" in verdict["violations"]
    )


def test_without_a_beneficial_case_the_support_is_challenged() -> None:
    data = scenario(
        category="barrier", expect={"kinds": ["barrier"], "held": {"push": "capability:forge"}}
    )
    case = load_scenario(data, name="b")

    verdict = lab([case])["support"]

    assert verdict["verdict"] == "challenged"
    assert "no beneficial case where scoped did more useful outage work" in verdict["violations"]


def test_policy_lab_verify_prints_the_verdicts() -> None:
    printed = verify_dir(CORPUS[0].parent)

    assert "\nsupport: supported\n" in printed
    assert "\nchallenge: caught in all four domains\n" in printed
    assert printed.rstrip().endswith(f"verify: ok ({len(CORPUS)} scenarios)")


def test_policy_lab_without_files_runs_the_shipped_corpus() -> None:
    out = StringIO()
    call_command("policy_lab", "--json", stdout=out)
    assert json.loads(out.getvalue())["hash"] == lab(corpus())["hash"]


@pytest.mark.parametrize(
    ("remove", "named"),
    [
        ("*-all-blocked.json", "corpus: 0 all-blocked case(s), the study needs at least 4"),
        ("sre-telemetry-independent.json", "corpus: 3 independent-safe-work case(s)"),
        ("*-freshness.json", "corpus: 5 barrier case(s)"),
        (
            "sre-*-annotation-fault.json",
            "no hidden dependency (annotation fault) in the sre domain",
        ),
    ],
    ids=["all-blocked", "independent", "barrier", "a-domains-hidden-dependency"],
)
def test_verify_fails_naming_a_missing_corpus_minimum(
    tmp_path: Path, remove: str, named: str
) -> None:
    directory = copy_of_corpus(tmp_path)
    for path in directory.glob(remove):
        path.unlink()
    if "barrier" in named:  # five left: drop two more to fall below four
        for path in sorted(directory.glob("*-transaction.json")):
            path.unlink()
        named = "corpus: 3 barrier case(s), the study needs at least 4"

    with pytest.raises(CommandError, match=named.replace("(", r"\(").replace(")", r"\)")):
        verify_dir(directory)


def test_verify_fails_without_a_planted_naive_control(tmp_path: Path) -> None:
    directory = copy_of_corpus(tmp_path)
    for path in directory.glob("*.json"):
        data = json.loads(path.read_text())
        data["expect"]["kinds"] = [k for k in data["expect"]["kinds"] if k != "naive_control"]
        data["expect"].get("invalid", {}).pop("naive", None)
        path.write_text(json.dumps(data))

    with pytest.raises(CommandError, match="corpus: no planted naive control"):
        verify_dir(directory)


def test_a_scenario_declares_its_category_and_one_of_the_four_domains() -> None:
    data: dict[str, Any] = scenario(domain="retail")
    del data["category"]

    with pytest.raises(ScenarioError) as raised:
        load_scenario(data, name="bad")

    assert raised.value.errors == [
        "domain: one of software_factory, sre, customer_support, research_operations",
        "category: required, one of independent, all_blocked, barrier, annotation_fault",
    ]


def test_a_task_may_start_done_and_an_outage_may_take_several_capabilities_down() -> None:
    data = scenario(
        capabilities=["forge", "workspace"],
        outage={"capabilities": ["forge", "workspace"], "start": 0, "steps": 2},
        tasks=[
            {"key": "fix", "capabilities": ["workspace"], "state": "succeeded"},
            {"key": "docs", "capabilities": ["workspace"]},
            {"key": "lint", "prerequisites": ["fix"]},
        ],
        expect=None,
    )
    del data["expect"]
    case = load_scenario(data, name="both")

    scoped = simulate(case, "scoped")

    assert scoped["executions"][0] == ["lint", 0]  # fix was done; docs waits for the workspace
    assert ["docs", 0] not in scoped["executions"]
    assert scoped["completed"]
