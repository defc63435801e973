"""JSON output for management commands."""

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from fleet.models import Fleet


def emit(command: BaseCommand, value: Any) -> None:
    command.stdout.write(json.dumps(value, indent=2, default=str))


def fleet_named(name: str) -> Fleet:
    fleet = Fleet.objects.filter(name=name).first()
    if fleet is None:
        raise CommandError(f"no fleet named {name!r}; create it with fleet_create {name}")
    return fleet
