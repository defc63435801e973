"""source_add FLEET datasource|workspace|host|command NAME VALUE."""

from django.core.management.base import BaseCommand, CommandError

from fleet import services
from fleet.management.commands._output import emit, fleet_named
from fleet.models import VerificationSource


class Command(BaseCommand):
    help = (
        "Register a verification source: a data source (a PostgreSQL DSN, a sqlite:/// URL or a "
        "SQLite file's path), a workspace directory, a host name or a command line."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("fleet")
        parser.add_argument("kind", choices=VerificationSource.Kind.values)
        parser.add_argument("name")
        parser.add_argument("value")

    def handle(self, *args, fleet: str, kind: str, name: str, value: str, **options):  # type: ignore[no-untyped-def]
        try:
            source = services.source_add(
                fleet=fleet_named(fleet), kind=kind, name=name, value=value
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        emit(
            self, {"fleet": fleet, "kind": source.kind, "name": source.name, "value": source.value}
        )
