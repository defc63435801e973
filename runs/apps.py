"""The work: runs, tasks, attempts, claims, the frontier and the retry policy."""

from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"

    def ready(self) -> None:
        from fleet.signals import reconciling  # models are loaded now
        from runs.reconcile import reenqueue

        reconciling.connect(reenqueue, dispatch_uid="runs.reconcile")
