"""A fleet's routing configuration, cached between escalations: its due rules, routing rules (with
their pools' names) and channels.

Every new escalation is routed with it, so it lives in the cache (Redis in production, shared by
every web process) and is dropped when a rule, pool or channel of the fleet is saved or deleted
(the services behind pool_set, route_add, due_set, channel_add and the admin alike), at once and
again at commit: a reader between the two would otherwise put the old configuration back. With
the cache unreachable it is read from the database.
"""

import logging
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache
from django.db import connection
from django.db.models.signals import post_delete, post_save

from escalations import routing
from escalations.models import Channel, DueRule, Pool, RoutingRule
from fleet.keyring import drop_now_and_at_commit

log = logging.getLogger(__name__)

TIMEOUT = 300  # seconds: an invalidation lost with the cache's outage heals within this


@dataclass(frozen=True)
class Rule:
    """A routing rule as routing a new escalation needs it."""

    id: int
    position: int
    pool_id: int
    pool_name: str
    next_pool_id: int | None
    agent_role: str
    capability: str
    run: str
    failure_kind: str

    def matching(self) -> routing.Rule:
        return routing.Rule(
            id=self.id,
            position=self.position,
            agent_role=self.agent_role,
            capability=self.capability,
            run=self.run,
            failure_kind=self.failure_kind,
        )


@dataclass(frozen=True)
class Config:
    due_rules: tuple[routing.DueRule, ...]
    rules: tuple[Rule, ...]
    channels: tuple[tuple[int, str, str], ...]  # the fleet's channels: (id, kind, target), by id


def cache_key(fleet_id: int) -> str:
    return f"routing:v1:{connection.settings_dict['NAME']}:{fleet_id}"


def config_of(fleet_id: int) -> Config:
    """The fleet's routing configuration, from the cache when it is there."""
    key = cache_key(fleet_id)
    try:
        cached: Config | None = cache.get(key)
    except Exception as exc:  # the cache backend's own errors: read the database
        log.debug("routing cache unreachable: %s", exc)
        return load(fleet_id)
    if cached is None:
        cached = load(fleet_id)
        try:
            cache.set(key, cached, timeout=TIMEOUT)
        except Exception as exc:
            log.debug("routing configuration not cached: %s", exc)
    return cached


def load(fleet_id: int) -> Config:
    return Config(
        due_rules=tuple(
            routing.DueRule(minutes=minutes, failure_kind=kind, urgency=urgency)
            for minutes, kind, urgency in DueRule.objects.filter(fleet_id=fleet_id)
            .order_by("pk")
            .values_list("minutes", "failure_kind", "urgency")
        ),
        rules=tuple(
            Rule(*row)
            for row in RoutingRule.objects.filter(fleet_id=fleet_id)
            .order_by("position", "pk")
            .values_list(
                "pk",
                "position",
                "pool_id",
                "pool__name",
                "next_pool_id",
                "agent_role",
                "capability",
                "run",
                "failure_kind",
            )
        ),
        channels=tuple(
            Channel.objects.filter(fleet_id=fleet_id)
            .order_by("pk")
            .values_list("pk", "kind", "target")
        ),
    )


def forget(fleet_id: int | None) -> None:
    if fleet_id is None:
        return
    drop_now_and_at_commit(cache_key(fleet_id), f"routing of fleet {fleet_id}")


def changed(sender: type, instance: Any, **kwargs: object) -> None:
    forget(getattr(instance, "fleet_id", None))


def connect() -> None:
    for model in (DueRule, RoutingRule, Pool, Channel):
        uid = f"escalations.routing_config.{model.__name__}"
        post_save.connect(changed, sender=model, dispatch_uid=f"{uid}.save")
        post_delete.connect(changed, sender=model, dispatch_uid=f"{uid}.delete")
