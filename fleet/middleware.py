"""Turns a lost database into 503 with Retry-After instead of a 500."""

from collections.abc import Callable

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

from fleet.errors import error, errors_body, rolled_back


def database_unavailable(exc: BaseException | None = None) -> JsonResponse:
    """503 with Retry-After. The database broke a deadlock with concurrent changes (or a
    serialization conflict) as often as the request would take it again: it is up, and says so."""
    said = (
        "conflicted with concurrent changes to the same rows and was rolled back; nothing was "
        "changed: retry in a moment"
        if exc is not None and rolled_back(exc)
        else "the database is unavailable; retry later"
    )
    response = JsonResponse(errors_body([error("database", said)]), status=503)
    response["Retry-After"] = str(settings.DATABASE_RETRY_AFTER_SECONDS)
    return response


def is_database_down(exc: BaseException) -> bool:
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    # psycopg raises its own OperationalError wrapped by Django; a closed connection can also
    # surface as a plain DatabaseError whose cause is a connection failure.
    cause = exc.__cause__
    return (
        isinstance(exc, DatabaseError) and cause is not None and "connection" in str(cause).lower()
    )


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            return self.get_response(request)
        except DatabaseError as exc:
            if is_database_down(exc):
                return database_unavailable(exc)
            raise

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, DatabaseError) and is_database_down(exception):
            return database_unavailable(exception)
        return None


MACHINE_FACING = ("/api/", "/hooks/")
READ_API = "/api/"  # GET (and HEAD) only: agents write through the signed webhook


class MethodNotAllowedMiddleware:
    """A method a machine-facing route does not take is a JSON 405 naming the allowed ones (the
    router answers Django's empty HTML 405 otherwise)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method == "HEAD" and request.path.startswith(READ_API):
            return self.head(request)
        response = self.get_response(request)
        if (
            response.status_code == 405
            and request.path.startswith(MACHINE_FACING)
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            allowed = response.get("Allow", "")
            json = JsonResponse(
                errors_body(
                    [error("method", f"{request.method} is not allowed here; use {allowed}")]
                ),
                status=405,
            )
            json["Allow"] = allowed
            return json
        return response

    def head(self, request: HttpRequest) -> HttpResponse:
        """HEAD on the read API: the GET's status and headers, its Content-Length included,
        without its body (every HTTP server must take HEAD where it takes GET)."""
        request.method = "GET"
        try:
            response = self.get_response(request)
        finally:
            request.method = "HEAD"
        if not response.streaming:
            response.content = b""
        return response
