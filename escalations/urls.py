"""Pages of the desk: sign-in, the queue, a packet and what a reviewer can do with it, reports."""

from django.contrib.auth import views as auth_views
from django.urls import path

from escalations import views

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", views.SignInView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("password/", views.SetPasswordView.as_view(), name="set-password"),
    path("escalations/", views.queue, name="queue"),
    path("reports/", views.reports_page, name="reports"),
    path("reports/<str:table>.csv", views.reports_csv, name="reports-csv"),
    path("escalations/<int:escalation_id>/", views.packet, name="packet"),
    path("escalations/<int:escalation_id>/status/", views.packet_status, name="packet-status"),
    path("escalations/<int:escalation_id>/claim/", views.claim, name="claim"),
    path("escalations/<int:escalation_id>/release/", views.release, name="release"),
    path("escalations/<int:escalation_id>/answer/", views.answer, name="answer"),
    path("escalations/<int:escalation_id>/reroute/", views.reroute, name="reroute"),
    path("escalations/<int:escalation_id>/return/", views.return_packet, name="return"),
    path("escalations/<int:escalation_id>/abort/", views.abort, name="abort"),
    path(
        "escalations/<int:escalation_id>/claims/<int:claim_id>/",
        views.claim_row,
        name="claim-row",
    ),
    path(
        "escalations/<int:escalation_id>/claims/<int:claim_id>/recheck/",
        views.recheck,
        name="recheck",
    ),
    path(
        "escalations/<int:escalation_id>/claims/<int:claim_id>/check/",
        views.check_by_hand,
        name="check-by-hand",
    ),
]
