"""policy_lab FILE... [--json] [--verify]: outage scenarios under global halt, scoped and naive."""

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs import simulation


class Command(BaseCommand):
    help = (
        "Run outage scenarios under global_halt, scoped and naive continuation and print the "
        "table (or JSON). --verify fails if naive's invalid work goes undetected, scoped executes "
        "invalid work on complete declarations, a scenario's optional expect check fails, or two "
        "runs hash differently."
    )
    requires_system_checks: list[str] = []  # pure: needs no database or app checks

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="+", metavar="FILE", help="scenario JSON files")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print JSON")
        parser.add_argument("--verify", action="store_true", help="fail on a failed check")

    def handle(
        self, *args: Any, files: list[str], as_json: bool, verify: bool, **options: Any
    ) -> None:
        scenarios = [load(Path(name)) for name in files]
        names = [s.name for s in scenarios]
        if len(set(names)) != len(names):
            raise CommandError("two scenario files have the same name")
        report = simulation.lab(scenarios)
        failures = simulation.verify_lab(scenarios, report) if verify else []
        if as_json:
            output = {**report, "failures": failures} if verify else report
            self.stdout.write(json.dumps(output, indent=2, sort_keys=True))
        else:
            self.stdout.write(simulation.table(report))
            if verify:
                verdict = "ok" if not failures else f"{len(failures)} failed"
                self.stdout.write(f"verify: {verdict} ({len(scenarios)} scenarios)")
        if failures:
            raise CommandError("verification failed:\n" + "\n".join(failures))


def load(path: Path) -> simulation.Scenario:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise CommandError(f"{path}: {error.strerror}") from error
    except ValueError as error:
        raise CommandError(f"{path}: not JSON: {error}") from error
    try:
        return simulation.load_scenario(data, name=path.stem)
    except simulation.ScenarioError as error:
        raise CommandError(str(error)) from error
