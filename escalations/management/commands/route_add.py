"""route_add FLEET POOL [--agent-role R] [--capability C] [--run RUN] [--failure-kind K]
[--next-pool POOL] [--position N]; route_add FLEET --clear removes the fleet's rules."""

import argparse

from django.core.management.base import BaseCommand, CommandError

from escalations.models import RoutingRule
from escalations.services import routing
from fleet.errors import Refusal
from fleet.management.commands._output import emit, fleet_named


def position(value: str) -> int:
    """--position as the rule's column holds it: a whole number from 0 to MAX_POSITION."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if not 0 <= number <= routing.MAX_POSITION:
        raise argparse.ArgumentTypeError(
            f"{number} is out of range: from 0 to {routing.MAX_POSITION} (0 is tried first)"
        )
    return number


class Command(BaseCommand):
    help = (
        "Add a routing rule: a new escalation that matches every condition given goes to POOL "
        "(the first matching rule by position wins); overdue, it goes to --next-pool, then to "
        "the fleet's managers."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("fleet")
        parser.add_argument("pool", nargs="?", default="")
        parser.add_argument("--agent-role", default="")
        parser.add_argument("--capability", default="")
        parser.add_argument("--run", default="")
        parser.add_argument("--failure-kind", default="")
        parser.add_argument("--next-pool", default="")
        parser.add_argument("--position", type=position)
        parser.add_argument("--clear", action="store_true", help="remove the fleet's rules")

    def handle(self, *args, fleet, pool, clear, **options):  # type: ignore[no-untyped-def]
        found = fleet_named(fleet)
        if clear:
            removed, _ = RoutingRule.objects.filter(fleet=found).delete()
            emit(self, {"fleet": fleet, "removed": removed})
            return
        if not pool:
            raise CommandError("name the POOL the rule routes to (or --clear)")
        try:
            rule = routing.route_add(
                fleet=found,
                pool=pool,
                next_pool=options["next_pool"],
                agent_role=options["agent_role"],
                capability=options["capability"],
                run=options["run"],
                failure_kind=options["failure_kind"],
                position=options["position"],
            )
        except Refusal as refused:
            raise CommandError(refused.message) from None
        emit(
            self,
            {
                "id": rule.pk,
                "fleet": fleet,
                "position": rule.position,
                "pool": pool,
                "next_pool": options["next_pool"] or None,
                "agent_role": rule.agent_role,
                "capability": rule.capability,
                "run": rule.run,
                "failure_kind": rule.failure_kind,
            },
        )
