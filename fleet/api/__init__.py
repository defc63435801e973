"""The bearer-token read API for agents (and signed-in members), with its OpenAPI document."""

from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import django_auth

from fleet.api import escalations, runs
from fleet.api.access import AgentToken
from fleet.api.webhook_doc import write_side
from fleet.errors import Refusal, error, errors_body


class BulkheadAPI(NinjaAPI):
    """The read API's document, with the write side: the signed webhook's events (each type a
    schema with an example), the batch endpoint, their error bodies, and the notifications."""

    def get_openapi_schema(self, **kwargs: Any) -> Any:
        schema = super().get_openapi_schema(**kwargs)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        paths, webhooks = write_side(components)
        schema["paths"].update(paths)
        schema["webhooks"] = webhooks
        required_what_if(schema["paths"])
        return schema


def required_what_if(paths: dict[str, Any]) -> None:
    """The what-if's `down` and `steps` are required (each missing is a 422 naming it): their
    defaults in the signature only let the endpoint name both problems at once."""
    operation = next(
        (item["get"] for path, item in paths.items() if path.endswith("/what-if")), None
    )
    for parameter in operation["parameters"] if operation else ():
        if parameter["name"] in ("down", "steps"):
            parameter["required"] = True
            parameter["schema"].pop("default", None)


api = BulkheadAPI(
    title="Bulkhead",
    version="1",
    description="Agents send signed events to the webhook (`/hooks/v1/agents/<id>/events`, "
    "every event type below) and read runs, frontiers, next-attempt context and escalations "
    "here with their bearer token. Bulkhead sends the notifications under `webhooks` to the "
    "fleet's callback.",
    auth=[AgentToken(), django_auth],
    urls_namespace="api",
    docs_url="/docs",
)


def problem(request: HttpRequest, status: int, loc: str, msg: str) -> HttpResponse:
    return api.create_response(request, errors_body([error(loc, msg)]), status=status)


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
    return api.create_response(request, errors_body(errors), status=422)


@api.exception_handler(Refusal)
def refused(request: HttpRequest, exc: Refusal) -> HttpResponse:
    return api.create_response(request, errors_body(exc.errors), status=exc.status)


api.add_router("/", runs.router)
api.add_router("/", escalations.router)
