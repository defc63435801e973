"""The seeds' stories as streams of events, played through the signed webhook intake.

Each story is data (who posts what, when); `play` signs every event with the agent's key and
hands it to `fleet.intake.receive`, the same path an HTTP post takes. The demo and the
acceptance tests play the same streams, so what they show is what the app computes.
"""

import json
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

from fleet import intake, services, signing
from fleet.models import Agent, Fleet, SigningKey

BASE = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Step:
    agent: str
    type: str
    minute: float  # minutes after the story's start: the event's own time
    data: dict[str, Any]
    expect: int = 202


@dataclass(frozen=True)
class Story:
    name: str
    title: str
    agents: tuple[tuple[str, str, bool], ...]  # (name, role, orchestrator)
    steps: tuple[Step, ...] = field(default_factory=tuple)
    start: datetime = BASE
    tools: tuple[str, ...] = ()  # agents that are deterministic tools


class StoryError(Exception):
    pass


def envelope(story: Story, step: Step, start: datetime | None = None) -> bytes:
    at = (start or story.start) + timedelta(minutes=step.minute)
    body = {
        "type": step.type,
        "timestamp": at.isoformat().replace("+00:00", "Z"),
        "data": step.data,
    }
    return json.dumps(body, sort_keys=True).encode()


Transport = Callable[[str, dict[str, str], bytes], intake.Reply]


def in_process(agent_id: str, headers: dict[str, str], body: bytes) -> intake.Reply:
    """The intake as the webhook view calls it (the tests post over HTTP instead)."""
    return intake.receive(
        agent_id=agent_id, headers=headers, body=body, content_type="application/json"
    )


def post(
    fleet: Fleet,
    story: Story,
    index: int,
    step: Step,
    transport: Transport = in_process,
    start: datetime | None = None,
) -> intake.Reply:
    agent = Agent.objects.get(fleet=fleet, name=step.agent)
    key = SigningKey.objects.filter(agent=agent, active=True).order_by("pk").first()
    if key is None:
        raise StoryError(f"agent {step.agent} has no active signing key")
    body = envelope(story, step, start)
    headers = signing.sign(
        key.secret, msg_id=f"story_{story.name}_{index}", timestamp=int(time.time()), body=body
    )
    return transport(str(agent.pk), headers, body)


def play(
    fleet: Fleet,
    story: Story,
    steps: Iterable[int] | None = None,
    transport: Transport = in_process,
    start: datetime | None = None,
) -> list[intake.Reply]:
    """Post the story's steps in order (all, or the given indexes); each must get its status.

    `start` moves the story's events from `story.start` (e.g. to `recent`) and runs the server's
    clock with them: each step is received, and what Bulkhead does in response (checks,
    decisions, escalations, blockers) is stamped, at that step's time, as if the story were
    happening live, instead of all at the moment it is loaded. Without it, the server keeps its
    own clock, and a live story's events are timed by when they arrive (a few seconds apart).
    """
    replies = []
    chosen = set(steps) if steps is not None else None
    for index, step in enumerate(story.steps):
        if chosen is not None and index not in chosen:
            continue
        if start is None:
            reply = post(fleet, story, index, step, transport)
        else:
            with story_clock(start + timedelta(minutes=step.minute)):
                reply = post(fleet, story, index, step, transport, start)
        if reply.status != step.expect:
            raise StoryError(
                f"{story.name} step {index} ({step.type} by {step.agent}): "
                f"expected {step.expect}, got {reply.status} {reply.body}"
            )
        replies.append(reply)
    return replies


@contextmanager
def story_clock(at: datetime) -> Iterator[None]:
    """Django's clock reads `at` (for the demo, which plays a story that took minutes at once)."""
    with mock.patch("django.utils.timezone.now", return_value=at):
        yield


def recent(story: Story, now: datetime) -> datetime:
    """A start for the story such that its last event happened a minute before `now`.

    Bulkhead times a live event by when it receives it, so a story that took minutes is played
    with the server's clock at each step's time (`play(start=...)`); ending just before `now`,
    what the worker then does on its own clock follows the story instead of preceding it.
    """
    return now - timedelta(minutes=max((step.minute for step in story.steps), default=0) + 1)


def ensure_agents(fleet: Fleet, story: Story) -> None:
    for name, role, orchestrator in story.agents:
        if not Agent.objects.filter(fleet=fleet, name=name).exists():
            services.agent_create(
                fleet=fleet,
                name=name,
                role=role,
                orchestrator=orchestrator,
                tool=name in story.tools,
            )
