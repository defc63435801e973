"""The Redis cache keeps one client a connection pool: an event's cache calls (its agent's keys,
its rate count) build no client of their own."""

from typing import Any

import pytest
from django.core.cache import caches
from redis import Redis

from tests.fleet.test_lean_intake import redis_cache_url


@pytest.fixture
def redis_cache(settings: Any) -> Any:
    settings.CACHES = {
        "default": {"BACKEND": "fleet.cache.RedisCache", "LOCATION": redis_cache_url()}
    }
    return caches["default"]


def test_the_cache_builds_its_client_once(redis_cache: Any, monkeypatch: Any) -> None:
    built: list[Redis] = []
    original = Redis.__init__

    def counted(self: Redis, *args: Any, **kwargs: Any) -> None:
        built.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(Redis, "__init__", counted)
    redis_cache.set("cache-test", {"a": 1}, timeout=5)
    for _ in range(3):
        assert redis_cache.get("cache-test") == {"a": 1}
    assert redis_cache.add("cache-test", 2, timeout=5) is False
    redis_cache.delete("cache-test")

    assert redis_cache.get("cache-test") is None
    assert len(built) == 1


def test_a_reader_and_a_writer_of_two_servers_each_have_theirs(settings: Any) -> None:
    # Django's Redis cache writes to the first server and reads from the others.
    url = redis_cache_url()
    settings.CACHES = {"default": {"BACKEND": "fleet.cache.RedisCache", "LOCATION": f"{url},{url}"}}
    client = caches["default"]._cache

    writer = client.get_client(write=True)
    reader = client.get_client(write=False)

    assert writer is client.get_client(write=True)
    assert reader is client.get_client(write=False)
    assert writer is not reader
