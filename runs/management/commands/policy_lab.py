"""policy_lab [FILE...] [--from-runs FLEET] [--json] [--verify] [--write-results DIR]: outage
scenarios under global halt, scoped and naive continuation."""

import json
import shutil
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.models import Fleet
from runs import simulation
from runs.lab_runs import fleet_scenarios

CORPUS = Path(__file__).resolve().parents[2] / "scenarios"


class Command(BaseCommand):
    help = (
        "Run outage scenarios (the shipped corpus when no FILE is given) under global_halt, "
        "scoped and naive continuation and print the measures, the support and challenge "
        "verdicts and the result hash (or JSON). --verify fails if a corpus minimum is not met, "
        "naive's invalid work goes undetected, scoped executes invalid work on complete "
        "declarations, a scenario's expected check fails, or two runs hash differently. "
        "--from-runs FLEET makes the scenarios from the fleet's finished runs and the outages "
        "they saw."
    )
    requires_system_checks: list[str] = []  # the lab is pure; --from-runs reads the database

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="*", metavar="FILE", help="scenario JSON files")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print JSON")
        parser.add_argument("--verify", action="store_true", help="fail on a failed check")
        parser.add_argument(
            "--without-minimums",
            action="store_true",
            help="with --verify: check each scenario, not the study's corpus minimums",
        )
        parser.add_argument(
            "--from-runs", metavar="FLEET", help="the fleet's finished runs as the scenarios"
        )
        parser.add_argument(
            "--write-results",
            metavar="DIR",
            help="keep the inputs, the raw JSON results and the table in DIR",
        )

    def handle(
        self,
        *args: Any,
        files: list[str],
        as_json: bool,
        verify: bool,
        without_minimums: bool,
        from_runs: str | None,
        write_results: str | None,
        **options: Any,
    ) -> None:
        if from_runs is not None:
            if files:
                raise CommandError("--from-runs: give either FILEs or a fleet, not both")
            inputs = from_fleet(from_runs)
            minimums = False  # a fleet's history is not the study's predeclared corpus
        else:
            paths = [Path(name) for name in files] or sorted(CORPUS.glob("*.json"))
            inputs = {path.stem: read(path) for path in paths}
            if len(inputs) != len(paths):
                raise CommandError("two scenario files have the same name")
            minimums = not without_minimums
        observed = from_runs is not None
        scenarios = [load(name, data, observed) for name, data in sorted(inputs.items())]
        if not scenarios:
            raise CommandError(
                f"--from-runs: fleet {from_runs!r} has no finished run that saw an outage"
            )
        report = simulation.lab(scenarios)
        failures = simulation.verify_lab(scenarios, report, minimums=minimums) if verify else []
        printed = simulation.table(report)
        if verify:
            verdict = "ok" if not failures else f"{len(failures)} failed"
            printed += f"\nverify: {verdict} ({len(scenarios)} scenarios)"
        if as_json:
            output = {**report, "failures": failures} if verify else report
            self.stdout.write(json.dumps(output, indent=2, sort_keys=True))
        else:
            self.stdout.write(printed)
        if write_results:
            try:
                keep(Path(write_results), inputs, report, printed)
            except OSError as error:
                where = error.filename or write_results
                raise CommandError(
                    f"--write-results: cannot write the results under {where}: {error.strerror}"
                ) from error
        if failures:
            raise CommandError("verification failed:\n" + "\n".join(failures))


def from_fleet(name: str) -> dict[str, Any]:
    fleet = Fleet.objects.filter(name=name).first()
    if fleet is None:
        raise CommandError(f"--from-runs: no fleet named {name!r}")
    return fleet_scenarios(fleet=fleet)


def read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise CommandError(f"{path}: {error.strerror}") from error
    except ValueError as error:
        raise CommandError(f"{path}: not JSON: {error}") from error


def load(name: str, data: Any, observed: bool) -> simulation.Scenario:
    try:
        return simulation.load_scenario(data, name=name, observed=observed)
    except simulation.ScenarioError as error:
        raise CommandError(str(error)) from error


def keep(directory: Path, inputs: dict[str, Any], report: dict[str, Any], printed: str) -> None:
    """The evidence: every input as it was read, the raw results and the readable table."""
    shutil.rmtree(directory / "inputs", ignore_errors=True)
    (directory / "inputs").mkdir(parents=True)
    for name, data in sorted(inputs.items()):
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        (directory / "inputs" / f"{name}.json").write_text(text, encoding="utf-8")
    results = json.dumps(report, indent=2, sort_keys=True) + "\n"
    (directory / "results.json").write_text(results, encoding="utf-8")
    table = (
        "# Policy lab results\n\n"
        "Regenerated by `make policy-lab`. The inputs are in `inputs/`, the raw results in "
        "`results.json`; the columns are explained in `runs/scenarios/README.md`.\n\n"
        f"Result hash: `{report['hash']}`\n\n```text\n{printed}\n```\n"
    )
    (directory / "results.md").write_text(table, encoding="utf-8")
