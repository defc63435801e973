"""The Celery app: every task is idempotent and acknowledged late."""

import os
from typing import Any

from celery import Celery, Task, signals
from django import db

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleet.settings")

app = Celery("fleet")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.task_prerun.connect
@signals.task_postrun.connect
def close_old_connections(sender: Task, **kwargs: Any) -> None:
    """Around each task, what Django does around a request.

    A connection that is broken or older than CONN_MAX_AGE is closed, and the next one is
    health-checked before use. An eager task runs in its caller's transaction and connection,
    which are not ours to close.
    """
    if getattr(sender.request, "is_eager", False):
        return
    db.close_old_connections()
