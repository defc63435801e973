"""The human desk: escalations, packets, reviewers' decisions, and every page."""

from django.apps import AppConfig


class EscalationsConfig(AppConfig):
    name = "escalations"

    def ready(self) -> None:
        from escalations.services.packet import open_for_decision  # models are loaded now
        from escalations.services.packet_checks import reenqueue
        from fleet.signals import reconciling
        from runs.signals import escalation_needed

        escalation_needed.connect(open_for_decision, dispatch_uid="escalations.open_for_decision")
        reconciling.connect(reenqueue, dispatch_uid="escalations.packet_checks")
