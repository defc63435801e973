"""Acceptance: the seeds' stories played through the signed webhook over HTTP."""

from typing import Any

import pytest
from django.test import Client

from fleet import intake, services
from fleet.models import ApiToken, Fleet
from fleet.stories import Story, ensure_agents
from tests.conftest import wsgi_headers


class Http:
    """Posts the story's signed events to the webhook URL, as an agent would."""

    def __init__(self) -> None:
        self.client = Client()

    def __call__(self, agent_id: str, headers: dict[str, str], body: bytes) -> intake.Reply:
        extra = wsgi_headers(headers)
        response = self.client.generic(
            "POST",
            f"/hooks/v1/agents/{agent_id}/events",
            body,
            content_type="application/json",
            **extra,
        )
        return intake.Reply(response.status_code, response.json())


@pytest.fixture
def http() -> Http:
    return Http()


def fleet_for(story: Story, *, callback_url: str = "") -> Fleet:
    fleet = services.fleet_create(name="acme", callback_url=callback_url)
    ensure_agents(fleet, story)
    return fleet


def api(client: Any, fleet: Fleet, path: str) -> Any:
    agent = fleet.agents.order_by("created_at").first()
    _, token = ApiToken.issue(agent)
    response = client.get(f"/api/v1{path}", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    return response.json()
