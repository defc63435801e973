"""The human desk: escalations, packets, reviewers' decisions, and every page."""

from django.apps import AppConfig

from runs.signals import escalation_needed


class EscalationsConfig(AppConfig):
    name = "escalations"

    def ready(self) -> None:
        from escalations.services.packet import (
            open_for_decision,  # it imports models: only once they are loaded
        )

        escalation_needed.connect(open_for_decision, dispatch_uid="escalations.open_for_decision")
