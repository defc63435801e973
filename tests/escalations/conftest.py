"""Shared fixtures for the desk's tests: acme's other people (alice is in tests/conftest.py)."""

from typing import Any

import pytest

from fleet.models import Fleet
from tests.escalations.desk import member


@pytest.fixture
def bob(fleet: Fleet) -> Any:
    """Another reviewer of acme."""
    return member("bob", fleet)


@pytest.fixture
def carol(fleet: Fleet) -> Any:
    """A manager of acme."""
    return member("carol", fleet, role="manager")
