"""fleet_create NAME [--callback-url URL] [--unnamed-roles-stop | --no-unnamed-roles-stop]:
create a fleet (or update its callback URL and its setting). A callback URL given, the same or a
new one, enables a callback that a 410 Gone disabled; `--callback-url ''` removes it."""

import argparse

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.core.validators import URLValidator, validate_slug
from django.db import transaction

from fleet import services
from fleet.management.commands._output import emit
from fleet.models import Fleet
from runs.capabilities import unnamed_roles_stop_set


class Command(BaseCommand):
    help = "Create a fleet; prints its name, callback URL and callback signing secret as JSON."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("name")
        parser.add_argument(
            "--callback-url",
            default=None,
            help="Where the fleet's notifications are sent; giving it (the same URL too) enables "
            "a callback a 410 Gone disabled; '' removes the callback.",
        )
        parser.add_argument(
            "--unnamed-roles-stop",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="While the fleet names no authority, observability or rollback capability, "
            "each external effect waits for a reviewer's release (off unless set).",
        )

    def handle(
        self,
        *args,
        name: str,
        callback_url: str | None,
        unnamed_roles_stop: bool | None,
        **options,
    ):  # type: ignore[no-untyped-def]
        try:
            validate_slug(name)
            if callback_url:
                URLValidator(schemes=["http", "https"])(callback_url)
        except ValidationError as exc:
            raise CommandError(f"{exc.messages[0]} ({callback_url or name})") from exc
        try:
            with transaction.atomic():
                was_disabled = Fleet.objects.filter(
                    name=name, callback_disabled_at__isnull=False
                ).exists()
                fleet = services.fleet_create(name=name, callback_url=callback_url)
                if unnamed_roles_stop is not None:
                    fleet = unnamed_roles_stop_set(fleet=fleet, on=unnamed_roles_stop)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        emit(
            self,
            {
                "fleet": fleet.name,
                "callback_url": fleet.callback_url or None,
                "callback_secret": fleet.callback_secret,
                # Why nothing is sent to it, while a 410 Gone keeps it disabled.
                "callback_disabled": (
                    f"{fleet.callback_disabled_reason} at {fleet.callback_disabled_at.isoformat()}"
                    if fleet.callback_disabled_at
                    else None
                ),
                "callback_enabled_again": was_disabled and fleet.callback_disabled_at is None,
                "unnamed_roles_stop": fleet.unnamed_roles_stop,
            },
        )
