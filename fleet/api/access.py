"""Who reads the API: an agent by its bearer token, or a signed-in member; the fleets they see."""

from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from ninja.security import HttpBearer

from fleet.access import member_fleet_ids
from fleet.models import ApiToken, token_digest


class AgentToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Any:
        found = (
            ApiToken.objects.select_related("agent__fleet")
            .filter(digest=token_digest(token), revoked_at__isnull=True)
            .first()
        )
        if found is None:
            return None
        ApiToken.objects.filter(pk=found.pk).update(last_used_at=timezone.now())
        request.fleet_ids = [found.agent.fleet_id]  # type: ignore[attr-defined]
        return found.agent


def fleet_ids(request: HttpRequest) -> list[int]:
    ids = getattr(request, "fleet_ids", None)
    if ids is None:
        ids = member_fleet_ids(request.user)
    return ids
