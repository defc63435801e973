"""HTTP endpoints of the fleet: the agent webhook, the demo callback, health, the error pages."""

from collections.abc import Callable

from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST
from kombu import Connection

from escalations.views.pages import refused_in_place
from fleet import batches, intake, signing
from fleet.errors import error, errors_body
from fleet.middleware import READ_API, database_unavailable, is_database_down
from fleet.models import Fleet


def machine_facing(request: HttpRequest) -> bool:
    return request.path.startswith(("/api/", "/hooks/"))


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Agents get the JSON error body on an unknown path; people get the page."""
    if machine_facing(request):
        msg = f"no endpoint {request.path!r}; see /api/v1/openapi.json and the README"
        return JsonResponse(errors_body([error("path", msg)]), status=404)
    if request.headers.get("HX-Request") == "true":
        return refused_in_place(
            404, "That is gone, or belongs to a fleet you are not a member of. Reload the page."
        )
    return render(request, "404.html", status=404)


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if request.headers.get("HX-Request") == "true":
        return refused_in_place(403, "You may not do that here. Nothing was changed.")
    return render(request, "403.html", status=403)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """A form sent without a valid token: nothing changed; an htmx form keeps what was typed.

    On the read API, which takes GET only, it is a method not allowed (its OpenAPI document
    and docs are the only views there that Django's CSRF check sees)."""
    if request.path.startswith(READ_API):
        msg = f"{request.method} is not allowed here; use GET"
        response = JsonResponse(errors_body([error("method", msg)]), status=405)
        response["Allow"] = "GET"
        return response
    if request.headers.get("HX-Request") == "true":
        return refused_in_place(
            403,
            "This page's security token has expired (you signed in again elsewhere?). Nothing "
            "was changed and what you typed is still here: reload the page in another tab, "
            "then send it again.",
        )
    return render(request, "403_csrf.html", status=403)


@csrf_exempt
def agent_events(request: HttpRequest, agent_id: str) -> HttpResponse:
    return signed_post(request, agent_id, intake.receive, settings.WEBHOOK_MAX_BODY_BYTES, "events")


@csrf_exempt
def agent_batches(request: HttpRequest, agent_id: str) -> HttpResponse:
    limit = settings.WEBHOOK_MAX_BATCH_BYTES
    return signed_post(request, agent_id, batches.receive_batch, limit, "a batch of events")


def signed_post(
    request: HttpRequest,
    agent_id: str,
    receive: Callable[..., intake.Reply],
    limit: int,
    what: str,
) -> HttpResponse:
    if request.method != "POST":
        response = JsonResponse(
            errors_body([error("method", f"{request.method} is not allowed; POST {what}")]),
            status=405,
        )
        response["Allow"] = "POST"
        return response
    body = body_of(request, limit + 1)  # never buffer more than the limit
    if body is None:
        msg = (
            "a chunked body (Transfer-Encoding: chunked, no Content-Length) cannot be read by "
            "this server: send the body with a Content-Length"
        )
        return JsonResponse(errors_body([error("content-length", msg)]), status=411)
    try:
        reply = receive(
            agent_id=agent_id,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
            content_type=request.content_type or "",
        )
    except DatabaseError as exc:
        if is_database_down(exc):
            return database_unavailable(exc)
        raise
    # Sorted keys: a replay (read back from jsonb, which orders keys its own way) is byte-equal.
    response = JsonResponse(reply.body, status=reply.status, json_dumps_params={"sort_keys": True})
    for name, value in reply.headers.items():
        response[name] = value
    return response


def body_of(request: HttpRequest, most: int) -> bytes | None:
    """At most `most` bytes of the request's body. A chunked body has no Content-Length, so
    Django reads none of it: it is read from the server's input where the server ends that input
    itself (`wsgi.input_terminated`, as gunicorn does); None where it does not."""
    chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
    if not chunked or request.META.get("CONTENT_LENGTH"):
        return request.read(most)
    if request.META.get("wsgi.input_terminated"):
        return bytes(request.META["wsgi.input"].read(most))
    return None


@csrf_exempt
@require_POST
def demo_callback(request: HttpRequest, fleet_name: str) -> HttpResponse:
    """The demo fleet's callback URL: it checks each notification's signature, as a fleet's
    orchestrator would, and keeps nothing (the deliveries page shows what was sent)."""
    fleet = Fleet.objects.filter(name=fleet_name).first()
    headers = {k.lower(): v for k, v in request.headers.items()}
    try:
        signing.verify([fleet.callback_secret if fleet else ""], headers=headers, body=request.body)
    except signing.SignatureError:
        return JsonResponse(errors_body([error("webhook-signature", "not ours")]), status=401)
    return HttpResponse(status=204)


@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})


@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    """Ready when the database answers (503 otherwise). The broker and the cache are reported as
    `degraded` when unreachable, not as unready: events are still applied (the reconciler
    enqueues their work once the broker is back; limits are not enforced without the cache)."""
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
    except Exception as exc:  # noqa: BLE001 - any broker failure means degraded
        checks["broker"] = f"degraded: {exc.__class__.__name__}"
    try:
        cache.get("readyz")
        checks["cache"] = "ok"
    except Exception as exc:  # noqa: BLE001 - the cache backend's own errors
        checks["cache"] = f"degraded: {exc.__class__.__name__}"
    ready = checks["database"] == "ok"
    status = (
        "ok" if all(v == "ok" for v in checks.values()) else "degraded" if ready else "unavailable"
    )
    response = JsonResponse({"status": status, "checks": checks}, status=200 if ready else 503)
    if not ready:
        response["Retry-After"] = str(settings.DATABASE_RETRY_AFTER_SECONDS)
    return response
