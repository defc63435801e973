"""due_set FLEET MINUTES [--failure-kind K | --urgency low|normal|high]."""

from django.core.management.base import BaseCommand, CommandError

from escalations.services import routing
from fleet.errors import Refusal
from fleet.management.commands._output import emit, fleet_named


class Command(BaseCommand):
    help = (
        "Set how long a new escalation may wait: by failure kind, by the packet's urgency, or "
        "(neither) the fleet's default; the earliest matching due time wins. 0 removes it."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("fleet")
        parser.add_argument("minutes", type=int)
        parser.add_argument("--failure-kind", default="")
        parser.add_argument("--urgency", default="")

    def handle(self, *args, fleet, minutes, failure_kind, urgency, **options):  # type: ignore[no-untyped-def]
        try:
            routing.due_set(
                fleet=fleet_named(fleet),
                minutes=minutes,
                failure_kind=failure_kind,
                urgency=urgency,
            )
        except Refusal as refused:
            raise CommandError(refused.message) from None
        emit(
            self,
            {
                "fleet": fleet,
                "failure_kind": failure_kind or None,
                "urgency": urgency or None,
                "minutes": minutes or None,
            },
        )
