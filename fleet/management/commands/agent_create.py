"""agent_create FLEET NAME [--role ROLE] [--orchestrator]: an agent with its secrets."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.urls import reverse

from fleet import services
from fleet.management.commands._output import emit, fleet_named


class Command(BaseCommand):
    help = "Create an agent; prints its id, webhook endpoint, signing secret and API token (once)."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("fleet")
        parser.add_argument("name")
        parser.add_argument("--role", default="")
        parser.add_argument("--orchestrator", action="store_true")
        parser.add_argument("--tool", action="store_true", help="a deterministic tool for its role")

    def handle(
        self, *args, fleet: str, name: str, role: str, orchestrator: bool, tool: bool, **options
    ):  # type: ignore[no-untyped-def]
        try:
            agent, secret, token = services.agent_create(
                fleet=fleet_named(fleet), name=name, role=role, orchestrator=orchestrator, tool=tool
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        path = reverse("agent-events", kwargs={"agent_id": str(agent.pk)})
        emit(
            self,
            {
                "id": str(agent.pk),
                "fleet": fleet,
                "name": agent.name,
                "role": agent.role,
                "orchestrator": agent.is_orchestrator,
                "endpoint": settings.SITE_URL.rstrip("/") + path,
                "signing_secret": secret,
                "api_token": token,
            },
        )
