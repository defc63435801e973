"""agent_key_add FLEET AGENT [--revoke KEY_ID]: rotate an agent's signing keys."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from fleet import services
from fleet.management.commands._output import emit, fleet_named
from fleet.models import Agent, SigningKey


class Command(BaseCommand):
    help = (
        "Add a signing key to an agent and print it (once); the old keys stay active until "
        "revoked with --revoke KEY_ID, which adds nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("fleet")
        parser.add_argument("agent")
        parser.add_argument(
            "--revoke", type=int, metavar="KEY_ID", help="deactivate this key instead"
        )

    def handle(
        self, *args: Any, fleet: str, agent: str, revoke: int | None, **options: Any
    ) -> None:
        target = fleet_named(fleet)
        found = Agent.objects.filter(fleet=target, name=agent).first()
        if found is None:
            raise CommandError(f"no agent {agent!r} in fleet {fleet!r}")
        if revoke is None:
            key = services.signing_key_add(agent=found)
            printed: dict[str, Any] = {"key_id": key.pk, "signing_secret": key.secret}
        else:
            try:
                key = services.signing_key_revoke(agent=found, key_id=revoke, at=timezone.now())
            except ValueError as exc:
                raise CommandError(str(exc)) from exc
            printed = {"key_id": key.pk, "active": False, "revoked_at": key.revoked_at}
        active = SigningKey.objects.filter(agent=found, active=True).order_by("pk")
        emit(
            self,
            {
                "agent": found.name,
                "fleet": target.name,
                **printed,
                "active_key_ids": list(active.values_list("pk", flat=True)),
            },
        )
