"""The Redis cache with one client per connection pool.

Django's Redis cache builds a new `redis.Redis` for every call; building one fills its table of
some 170 response callbacks, which cost more than the round trip itself on every event (three
cache calls an event: the keyring, the rate count, the frontier's send mark). A client shares its
pool's connections and is safe to share between threads, so each pool keeps one.
"""

from typing import Any

from django.core.cache.backends import redis


class ClientPerPool(redis.RedisCacheClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Any] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        # Django's own get_client, but for the client kept (its private parts, as since 4.0).
        pool = self._get_connection_pool(write)  # type: ignore[attr-defined]
        client = self._clients.get(id(pool))
        if client is None:
            client = self._client(connection_pool=pool)  # type: ignore[attr-defined]
            self._clients[id(pool)] = client
        return client


class RedisCache(redis.RedisCache):
    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = ClientPerPool
