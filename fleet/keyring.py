"""The agent a webhook names and its active signing keys, cached between events.

Every event is signed, so its agent and keys are read on every request: they live in the cache
(Redis in production, shared by every web process) and are dropped when a key is added or
revoked, or the agent changes, at once and again at commit (a reader between the two would
otherwise put the old keys back). With the cache unreachable they are read from the database.
"""

import logging
import uuid
from typing import Any

from django.core.cache import cache
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from fleet.models import Agent, SigningKey

log = logging.getLogger(__name__)

TIMEOUT = 300  # seconds: an invalidation lost with the cache's outage heals within this
AGENT_FIELDS = ("id", "fleet_id", "name", "role", "is_orchestrator", "is_tool", "created_at")


def cache_key(agent_id: uuid.UUID) -> str:
    return f"keyring:v1:{agent_id}"


def agent_and_secrets(agent_id: uuid.UUID) -> tuple[Agent | None, list[str]]:
    """The agent and the secrets of its active keys (None, [] for an unknown agent)."""
    key = cache_key(agent_id)
    try:
        cached: dict[str, Any] | None = cache.get(key)
    except Exception as exc:  # the cache backend's own errors: read the database
        log.debug("keyring cache unreachable: %s", exc)
        cached = None
        key = ""
    if cached is None:
        cached = load(agent_id)
        if key:
            try:
                cache.set(key, cached, timeout=TIMEOUT)
            except Exception as exc:
                log.debug("keyring not cached: %s", exc)
    if not cached["agent"]:
        return None, []
    agent = Agent(**cached["agent"])
    agent._state.adding = False  # a row read back, as the ORM would give it
    return agent, list(cached["secrets"])


def load(agent_id: uuid.UUID) -> dict[str, Any]:
    rows = list(
        SigningKey.objects.filter(agent_id=agent_id, active=True)
        .order_by("pk")
        .values_list("secret", *(f"agent__{name}" for name in AGENT_FIELDS))
    )
    if not rows:
        return {"agent": None, "secrets": []}
    return {
        "agent": dict(zip(AGENT_FIELDS, rows[0][1:], strict=True)),
        "secrets": [row[0] for row in rows],
    }


def forget(agent_id: uuid.UUID) -> None:
    drop_now_and_at_commit(cache_key(agent_id), f"keyring of agent {agent_id}")


def drop_now_and_at_commit(key: str, what: str) -> None:
    """Drop a cached entry whose rows change: now, and again at commit (a reader between the
    two may have cached the rows as they were). The cache down: it expires on its own."""

    def drop() -> None:
        try:
            cache.delete(key)
        except Exception as exc:  # the cache backend's own errors
            log.warning("%s not dropped from the cache: %s", what, exc)

    drop()
    transaction.on_commit(drop)


def key_changed(sender: type, instance: SigningKey, **kwargs: object) -> None:
    forget(instance.agent_id)


def agent_changed(sender: type, instance: Agent, **kwargs: object) -> None:
    forget(instance.pk)


def connect() -> None:
    for name, signal in (("save", post_save), ("delete", post_delete)):
        signal.connect(key_changed, sender=SigningKey, dispatch_uid=f"keyring.key.{name}")
        signal.connect(agent_changed, sender=Agent, dispatch_uid=f"keyring.agent.{name}")
