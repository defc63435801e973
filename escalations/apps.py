"""The human desk: escalations, packets, reviewers' decisions, and every page."""

from django.apps import AppConfig

from fleet.signals import reconciling
from runs.signals import escalation_needed, run_failed


class EscalationsConfig(AppConfig):
    name = "escalations"

    def ready(self) -> None:
        # They import models: only once these are loaded.
        from escalations import routing_config
        from escalations.services.decisions import run_failed_by_the_policy
        from escalations.services.messages import reenqueue as resend
        from escalations.services.packet import open_for_decision
        from escalations.services.packet_checks import reenqueue

        routing_config.connect()
        escalation_needed.connect(open_for_decision, dispatch_uid="escalations.open_for_decision")
        run_failed.connect(run_failed_by_the_policy, dispatch_uid="escalations.run_failed")
        reconciling.connect(reenqueue, dispatch_uid="escalations.packet_checks")
        reconciling.connect(resend, dispatch_uid="escalations.messages")
