"""Bulkhead's Django project and the fleet: agents, keys, capabilities, the webhook boundary."""

from fleet.celery import app as celery_app

__all__ = ["celery_app"]
