"""Pages of the desk: sign-in, the queue, a packet and its actions, reports, runs, the fleet's."""

from django.contrib.auth import views as auth_views
from django.urls import path

from escalations.views import (
    answer,
    capabilities,
    deliveries,
    packet,
    queue,
    reports,
    routing,
    runs,
    sign_in,
    what_if,
)

urlpatterns = [
    path("", queue.home, name="home"),
    path("login/", sign_in.SignInView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("password/", sign_in.SetPasswordView.as_view(), name="set-password"),
    path("escalations/", queue.queue, name="queue"),
    path("reports/", reports.reports_page, name="reports"),
    path("reports/<str:table>.csv", reports.reports_csv, name="reports-csv"),
    path("escalations/<int:escalation_id>/", packet.packet, name="packet"),
    path("escalations/<int:escalation_id>/status/", packet.packet_status, name="packet-status"),
    path(
        "escalations/<int:escalation_id>/evidence/",
        packet.packet_evidence,
        name="packet-evidence",
    ),
    path("escalations/<int:escalation_id>/claim/", packet.claim, name="claim"),
    path("escalations/<int:escalation_id>/release/", packet.release, name="release"),
    path("escalations/<int:escalation_id>/answer/", answer.answer, name="answer"),
    path("escalations/<int:escalation_id>/reroute/", answer.reroute, name="reroute"),
    path("escalations/<int:escalation_id>/return/", answer.return_packet, name="return"),
    path("escalations/<int:escalation_id>/abort/", answer.abort, name="abort"),
    path("escalations/<int:escalation_id>/split/", answer.split, name="split"),
    path(
        "escalations/<int:escalation_id>/claims/<int:claim_id>/",
        packet.claim_row,
        name="claim-row",
    ),
    path(
        "escalations/<int:escalation_id>/claims/<int:claim_id>/recheck/",
        packet.recheck,
        name="recheck",
    ),
    path(
        "escalations/<int:escalation_id>/claims/<int:claim_id>/check/",
        packet.check_by_hand,
        name="check-by-hand",
    ),
    path("runs/", runs.runs, name="runs"),
    path("runs/<int:run_id>/", runs.run, name="run"),
    path("runs/<int:run_id>/what-if/", what_if.what_if, name="run-what-if"),
    path(
        "runs/<int:run_id>/claims/<int:claim_id>/check/", runs.claim_check, name="run-claim-check"
    ),
    path(
        "runs/<int:run_id>/claims/<int:claim_id>/load-bearing/",
        runs.claim_load_bearing,
        name="run-claim-load-bearing",
    ),
    path("runs/<int:run_id>/tasks/<int:task_id>/release/", runs.task_release, name="task-release"),
    path("capabilities/", capabilities.capabilities, name="capabilities"),
    path(
        "capabilities/<int:capability_id>/",
        capabilities.capability_set,
        name="capability-set",
    ),
    path(
        "capabilities/fleets/<int:fleet_id>/unnamed-roles-stop/",
        capabilities.unnamed_roles_stop,
        name="unnamed-roles-stop",
    ),
    path("deliveries/", deliveries.deliveries, name="deliveries"),
    path("l/<str:token>/", routing.escalation_link, name="escalation-link"),
    path("escalations/<int:escalation_id>/hand-off/", routing.hand_off, name="hand-off"),
    path("notifications/", routing.notifications, name="notifications"),
]
