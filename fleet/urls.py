"""URL routes: the agent webhook, the API, health, the desk and the admin."""

from django.contrib import admin
from django.urls import include, path

from fleet import views
from fleet.api import api

handler404 = "fleet.views.not_found"
handler403 = "fleet.views.permission_denied"

urlpatterns = [
    path("hooks/v1/agents/<str:agent_id>/events", views.agent_events, name="agent-events"),
    path("hooks/v1/agents/<str:agent_id>/batches", views.agent_batches, name="agent-batches"),
    path("api/v1/", api.urls),
    path("demo/callback/<slug:fleet_name>", views.demo_callback, name="demo-callback"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("", include("escalations.urls")),
]
