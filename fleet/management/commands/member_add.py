"""member_add USERNAME --fleet FLEET --role reviewer|manager."""

from django.core.management.base import BaseCommand, CommandError

from fleet import services
from fleet.management.commands._output import emit, fleet_named
from fleet.models import Membership


class Command(BaseCommand):
    help = (
        "Make a user a reviewer or manager of a fleet; a new user gets a one-time password, "
        "which signs in once and must then be replaced."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("username")
        parser.add_argument("--fleet", required=True)
        parser.add_argument("--role", required=True, choices=Membership.Role.values)
        parser.add_argument(
            "--new-password",
            action="store_true",
            help="issue an existing user a new one-time password (the old one stops working)",
        )

    def handle(self, *args, username: str, fleet: str, role: str, new_password: bool, **options):  # type: ignore[no-untyped-def]
        try:
            user, password = services.member_add(
                username=username,
                fleet=fleet_named(fleet),
                role=role,
                one_time=True,
                new_password=new_password,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        emit(
            self,
            {"username": user.get_username(), "fleet": fleet, "role": role, "password": password},
        )
