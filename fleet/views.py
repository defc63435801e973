"""HTTP endpoints of the fleet: the agent webhook and the health checks."""

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST
from kombu import Connection

from fleet import intake
from fleet.middleware import database_unavailable, is_database_down


@csrf_exempt
@require_POST
def agent_events(request: HttpRequest, agent_id: str) -> HttpResponse:
    limit = settings.WEBHOOK_MAX_BODY_BYTES
    body = request.read(limit + 1)  # never buffer more than the limit
    try:
        reply = intake.receive(
            agent_id=agent_id,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
            content_type=request.content_type or "",
        )
    except DatabaseError as exc:
        if is_database_down(exc):
            return database_unavailable()
        raise
    response = JsonResponse(reply.body, status=reply.status)
    for name, value in reply.headers.items():
        response[name] = value
    return response


@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})


@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except DatabaseError as exc:
        checks["database"] = f"unavailable: {exc.__class__.__name__}"
    try:
        broker = Connection(
            settings.CELERY_BROKER_URL,
            transport_options=settings.CELERY_BROKER_TRANSPORT_OPTIONS,
            connect_timeout=2,
        )
        with broker:
            broker.ensure_connection(max_retries=1, timeout=2)
        checks["broker"] = "ok"
    except Exception as exc:  # noqa: BLE001 - any broker failure means not ready
        checks["broker"] = f"unavailable: {exc.__class__.__name__}"
    ok = all(value == "ok" for value in checks.values())
    response = JsonResponse(
        {"status": "ok" if ok else "unavailable", "checks": checks}, status=200 if ok else 503
    )
    if not ok:
        response["Retry-After"] = str(settings.DATABASE_RETRY_AFTER_SECONDS)
    return response
