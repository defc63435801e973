"""The bearer-token read API for agents (and signed-in members), with its OpenAPI document."""

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from ninja import Field, NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer, django_auth

from fleet.access import member_fleet_ids
from fleet.models import ApiToken, token_digest


class AgentToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Any:
        found = (
            ApiToken.objects.select_related("agent__fleet")
            .filter(digest=token_digest(token), revoked_at__isnull=True)
            .first()
        )
        if found is None:
            return None
        ApiToken.objects.filter(pk=found.pk).update(last_used_at=timezone.now())
        request.fleet_ids = [found.agent.fleet_id]  # type: ignore[attr-defined]
        return found.agent


def fleet_ids(request: HttpRequest) -> list[int]:
    ids = getattr(request, "fleet_ids", None)
    if ids is None:
        ids = member_fleet_ids(request.user)
    return ids


api = NinjaAPI(
    title="Bulkhead",
    version="1",
    description="Read API for agents: runs, frontiers, next-attempt context, escalations.",
    auth=[AgentToken(), django_auth],
    urls_namespace="api",
    docs_url="/docs",
)


# Schemas: the error body every operation answers with.


class ErrorItem(Schema):
    loc: str = Field(description="authorization (401), path (404), or a parameter (422).")
    msg: str


class Errors(Schema):
    """An error: 401 without a valid bearer token (or session), 404 for what is not visible,
    422 for a malformed parameter."""

    errors: list[ErrorItem]


# An operation's documented errors, beside its 200: `response={200: Out, **ERRORS}`.
ERRORS: dict[int, type[Schema]] = {401: Errors, 404: Errors}


def problem(request: HttpRequest, status: int, loc: str, msg: str) -> HttpResponse:
    return api.create_response(request, {"errors": [{"loc": loc, "msg": msg}]}, status=status)


@api.exception_handler(AuthenticationError)
def unauthenticated(request: HttpRequest, exc: Exception) -> HttpResponse:
    response = problem(request, 401, "authorization", "a valid bearer token is required")
    response["WWW-Authenticate"] = "Bearer"
    return response


@api.exception_handler(HttpError)
def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    return problem(request, exc.status_code, "path", str(exc))


@api.exception_handler(ValidationError)
def invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = [
        {"loc": ".".join(str(p) for p in e.get("loc", ())), "msg": e.get("msg", "")}
        for e in exc.errors
    ]
    return api.create_response(request, {"errors": errors}, status=422)


api.add_router("/", "runs.api.router")
api.add_router("/", "escalations.api.router")
