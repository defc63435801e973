"""Each worker of a parallel test run (pytest-xdist's `-n`) on services of its own.

Loaded with `-p tests.parallel` (pyproject's addopts), so that it runs before Django reads its
settings. In worker `gwN` the Redis URLs of the broker and the cache move down by 2N databases
(CI's 14 and 15 become 12 and 13 in `gw1`; at most 8 workers), and the files the app keeps under
var/ go to var/workers/gwN/. pytest-django gives each worker its own test database (the name
ends in `_gwN`). Child processes a test starts (a Celery worker, gunicorn) inherit the moved
settings through the environment. Outside a parallel run it does nothing.
"""

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
REDIS_DATABASES = 16


def moved(url: str, by: int) -> str:
    """A Redis URL's database moved down by `by` (wrapping at 16); any other URL as it is."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        return url
    database = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{(database - by) % REDIS_DATABASES}"))


def apart(worker: str) -> None:
    number = int(worker.removeprefix("gw"))
    for name in ("CELERY_BROKER_URL", "CACHE_URL"):
        if os.environ.get(name):
            os.environ[name] = moved(os.environ[name], 2 * number)
    var = Path(os.environ.get("BULKHEAD_VAR_DIR", ROOT / "var"))
    os.environ["BULKHEAD_VAR_DIR"] = str(var / "workers" / worker)


if os.environ.get("PYTEST_XDIST_WORKER") and not os.environ.get("BULKHEAD_TEST_WORKER"):
    os.environ["BULKHEAD_TEST_WORKER"] = os.environ["PYTEST_XDIST_WORKER"]  # moved once
    apart(os.environ["PYTEST_XDIST_WORKER"])


def pytest_collection_modifyitems(items: list) -> None:  # type: ignore[type-arg]
    """Two tests with one id would run once in a parallel run (its scheduler keys tests by id)."""
    import collections

    import pytest

    twice = sorted(i for i, n in collections.Counter(t.nodeid for t in items).items() if n > 1)
    if twice:
        raise pytest.UsageError(f"tests share an id (name them apart): {', '.join(twice)}")
