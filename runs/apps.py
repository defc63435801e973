"""The work: runs, tasks, attempts, claims, the frontier and the retry policy."""

from django.apps import AppConfig

from fleet.signals import reconciling


class RunsConfig(AppConfig):
    name = "runs"

    def ready(self) -> None:
        # It imports models: only once they are loaded.
        from runs.reconcile import reenqueue

        reconciling.connect(reenqueue, dispatch_uid="runs.reconcile")
