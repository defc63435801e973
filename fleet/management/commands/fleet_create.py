"""fleet_create NAME [--callback-url URL]: create a fleet (or update its callback URL)."""

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.core.validators import URLValidator, validate_slug

from fleet import services
from fleet.management.commands._output import emit


class Command(BaseCommand):
    help = "Create a fleet; prints its name, callback URL and callback signing secret as JSON."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("name")
        parser.add_argument("--callback-url", default="")

    def handle(self, *args, name: str, callback_url: str, **options):  # type: ignore[no-untyped-def]
        try:
            validate_slug(name)
            if callback_url:
                URLValidator(schemes=["http", "https"])(callback_url)
        except ValidationError as exc:
            raise CommandError(f"{exc.messages[0]} ({callback_url or name})") from exc
        try:
            fleet = services.fleet_create(name=name, callback_url=callback_url)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        emit(
            self,
            {
                "fleet": fleet.name,
                "callback_url": fleet.callback_url or None,
                "callback_secret": fleet.callback_secret,
            },
        )
