"""pool_set FLEET POOL USERNAME...: the pool's reviewers, who take its escalations in turn."""

from django.core.management.base import BaseCommand, CommandError

from escalations.services import routing
from fleet.errors import Refusal
from fleet.management.commands._output import emit, fleet_named


class Command(BaseCommand):
    help = (
        "Create a reviewer pool or set its members (reviewers of the fleet); within a pool, "
        "the least recently assigned reviewer who is not away gets the next escalation."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("fleet")
        parser.add_argument("pool")
        parser.add_argument("usernames", nargs="+")

    def handle(self, *args, fleet, pool, usernames, **options):  # type: ignore[no-untyped-def]
        try:
            found = routing.pool_set(fleet=fleet_named(fleet), name=pool, usernames=usernames)
        except Refusal as refused:
            raise CommandError(refused.message) from None
        members = sorted(m.user.get_username() for m in found.members.select_related("user"))
        emit(self, {"fleet": fleet, "pool": found.name, "reviewers": members})
