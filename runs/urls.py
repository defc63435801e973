"""Pages of the work."""

from django.urls import path

from runs import views

urlpatterns = [
    path("runs/", views.runs, name="runs"),
    path("runs/<int:run_id>/", views.run, name="run"),
    path(
        "runs/<int:run_id>/claims/<int:claim_id>/check/", views.claim_check, name="run-claim-check"
    ),
    path("runs/<int:run_id>/tasks/<int:task_id>/release/", views.task_release, name="task-release"),
]
