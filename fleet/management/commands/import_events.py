"""import_events FLEET FILE.jsonl: record a past run as it happened.

One envelope per line, `{"agent": "<name>", "type": ..., "timestamp": ..., "data": ...}`, applied
in order through the webhook's own intake with `imported=True`: the envelope timestamps are the
event times, and what already happened is recorded, not refused by the gate. Every line is
validated first and the whole file is applied in one transaction, so a bad line names itself and
nothing of the file is applied. Each line's webhook-id is derived from the fleet and the line's
content, so importing the same file again applies nothing twice.
"""

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from fleet import intake
from fleet.errors import Refusal
from fleet.events import loads, parse
from fleet.management.commands._output import emit, fleet_named
from fleet.models import Agent, Event, Fleet


@dataclass
class Line:
    number: int
    body: bytes
    raw: dict[str, Any]
    agent: Agent
    run: str | None


@dataclass
class Report:
    fleet: str
    file: str
    lines: int = 0
    applied: int = 0
    skipped: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)

    def fail(self, number: int, errors: list[dict[str, str]]) -> None:
        self.errors += [{"line": number, **e} for e in errors]

    def as_json(self) -> dict[str, Any]:
        return {
            "fleet": self.fleet,
            "file": self.file,
            "lines": self.lines,
            "applied": self.applied,
            "skipped": self.skipped,
            "errors": self.errors,
            "runs": self.runs,
        }


class Abort(Exception):
    """A line the intake refused while the file was being applied: roll everything back."""


def webhook_id(fleet: Fleet, body: bytes) -> str:
    return "import_" + hashlib.sha256(fleet.name.encode() + b"\n" + body).hexdigest()


def read(fleet: Fleet, content: bytes, report: Report) -> list[Line]:
    """Validate every line before anything is applied; bad lines are reported by number."""
    agents = {a.name: a for a in Agent.objects.filter(fleet=fleet).select_related("fleet")}
    lines = []
    for number, text in enumerate(content.split(b"\n"), start=1):
        body = text.strip()
        if not body:
            continue
        report.lines += 1
        if len(body) > settings.WEBHOOK_MAX_BODY_BYTES:
            limit = settings.WEBHOOK_MAX_BODY_BYTES
            report.fail(number, [{"loc": "body", "msg": f"larger than the limit of {limit} bytes"}])
            continue
        try:
            raw, repeated = loads(body)
        except Refusal as exc:
            report.fail(number, exc.errors)
            continue
        except ValueError as exc:
            report.fail(number, [{"loc": "body", "msg": f"not valid JSON: {exc}"}])
            continue
        if not isinstance(raw, dict):
            msg = "must be a JSON object with agent, type, timestamp and data"
            report.fail(number, [{"loc": "body", "msg": msg}])
            continue
        name = raw.get("agent")
        agent = agents.get(name) if isinstance(name, str) else None
        errors = []
        if not isinstance(name, str) or not name:
            errors.append({"loc": "agent", "msg": "required: the name of the agent that sent it"})
        elif agent is None:
            errors.append({"loc": "agent", "msg": f"no agent {name!r} in fleet {fleet.name!r}"})
        try:
            _, data = parse(raw, imported=True, repeated=repeated)
        except Refusal as exc:
            errors += exc.errors
        if errors or agent is None:
            report.fail(number, errors)
            continue
        lines.append(Line(number, body, raw, agent, getattr(data, "run", None)))
    return lines


def import_events(*, fleet: Fleet, content: bytes, file: str = "") -> Report:
    """Apply a past run's events in one transaction; on any error nothing is applied."""
    report = Report(fleet=fleet.name, file=file)
    lines = read(fleet, content, report)
    if report.errors:
        return report
    try:
        with transaction.atomic():
            for line in lines:
                key = webhook_id(fleet, line.body)
                if Event.objects.filter(agent=line.agent, webhook_id=key).exists():
                    report.skipped += 1
                    continue
                reply = intake.apply(
                    agent=line.agent, webhook_id=key, body=line.body, raw=line.raw, imported=True
                )
                if reply.status != 202:
                    report.fail(line.number, reply.body.get("errors", []))
                    raise Abort
                report.applied += 1
                if line.run is not None and line.run not in report.runs:
                    report.runs.append(line.run)
    except Abort:
        report.applied = report.skipped = 0
        report.runs = []
    return report


class Command(BaseCommand):
    help = "Record a past run from a file of event envelopes (JSON Lines), with their timestamps."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("fleet")
        parser.add_argument("file")

    def handle(self, *args, fleet: str, file: str, **options):  # type: ignore[no-untyped-def]
        target = fleet_named(fleet)
        path = Path(file)
        try:
            content = path.read_bytes()
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc.strerror}") from None
        report = import_events(fleet=target, content=content, file=file)
        emit(self, report.as_json())
        if report.errors:
            first = report.errors[0]
            more = len(report.errors) - 1
            also = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
            raise CommandError(
                f"line {first['line']}: {first['loc']}: {first['msg']}{also}; "
                "nothing of the file was imported"
            )
