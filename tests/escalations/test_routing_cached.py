"""A fleet's routing configuration is cached between escalations and dropped when it changes:
a rule, a pool, a due time or a channel added or removed routes the next escalation at once."""

import pytest
from django.core.cache import cache

from escalations import routing, routing_config
from escalations.models import Channel, Pool
from escalations.services import messages
from tests.escalations.desk import member
from tests.escalations.routed import due, pool, route

pytestmark = pytest.mark.django_db


def test_each_change_is_seen_by_the_next_escalation(fleet):
    member("alice", fleet)
    assert routing_config.config_of(fleet.pk) == routing_config.Config((), (), ())  # cached
    due(fleet, 60)
    assert routing_config.config_of(fleet.pk).due_rules == (routing.DueRule(minutes=60),)
    pool(fleet, "desk", "alice")
    rule = route(fleet, "desk", capability="forge")
    (cached,) = routing_config.config_of(fleet.pk).rules
    assert (cached.id, cached.pool_name, cached.capability) == (rule.pk, "desk", "forge")
    renamed = Pool.objects.get(pk=rule.pool_id)
    renamed.name = "front-desk"
    renamed.save()
    assert routing_config.config_of(fleet.pk).rules[0].pool_name == "front-desk"
    channel = messages.channel_add(kind="email", target="desk@example.com", fleet=fleet)
    assert routing_config.config_of(fleet.pk).channels == (
        (channel.pk, "email", "desk@example.com"),
    )
    messages.channel_remove(channel=channel)
    assert routing_config.config_of(fleet.pk).channels == ()
    due(fleet, 0)  # removed
    assert routing_config.config_of(fleet.pk).due_rules == ()
    renamed.delete()  # and its rule with it
    assert routing_config.config_of(fleet.pk).rules == ()


def test_a_reviewers_channel_leaves_the_fleets_cached(fleet):
    user = member("alice", fleet)
    routing_config.config_of(fleet.pk)
    messages.channel_add(kind="email", target="alice@example.com", user=user)
    assert routing_config.config_of(fleet.pk).channels == ()
    assert Channel.objects.filter(user=user).exists()


def test_with_the_cache_unreachable_it_is_read_from_the_database(fleet, monkeypatch):
    def unreachable(*args, **kwargs):
        raise ConnectionError("cache down")

    monkeypatch.setattr(cache, "get", unreachable)
    monkeypatch.setattr(cache, "delete", unreachable)
    due(fleet, 30)
    assert routing_config.config_of(fleet.pk).due_rules == (routing.DueRule(minutes=30),)
