"""Refusals: the project's one error type, and the one JSON body every refusal becomes."""

from collections.abc import Iterable
from typing import Any

ErrorItem = dict[str, str]


def error(loc: str, msg: str) -> ErrorItem:
    """One thing wrong: where (`loc`, a field path or a header) and what (`msg`)."""
    return {"loc": loc, "msg": msg}


class Refusal(Exception):
    """Something Bulkhead will not do: every error names what is wrong, with an HTTP status.

    Services raise it with the errors (`Refusal([error("data.task", "...")], status=409)`) or,
    for a person at the desk, one sentence that says why and what to do next
    (`Refusal("Claimed by bob until ...")`). The webhook also keeps the parts of a refused event
    that did parse (`partial`), to name what they refer to that does not exist.
    """

    def __init__(
        self,
        errors: list[ErrorItem] | str,
        status: int = 422,
        *,
        partial: Any = None,
    ) -> None:
        items = [error("", errors)] if isinstance(errors, str) else errors
        super().__init__(items)
        self.errors = items
        self.status = status
        self.partial = partial

    def __str__(self) -> str:
        return self.message

    @property
    def message(self) -> str:
        """The errors as a sentence for a person: `msg`, or `loc: msg`, joined."""
        return "; ".join(f"{e['loc']}: {e['msg']}" if e["loc"] else e["msg"] for e in self.errors)


def errors_body(errors: Iterable[ErrorItem]) -> dict[str, list[ErrorItem]]:
    """The JSON body of every refusal: `{"errors": [{"loc", "msg"}, ...]}`."""
    return {"errors": list(errors)}


def body(refusal: Refusal) -> dict[str, list[Any]]:
    """The refusal's JSON body; a task that may not start also lists its typed blockers on their
    own (`"blockers": ["claim:plan.tier", ...]`), as its `{"loc": "blockers"}` errors name them."""
    found: dict[str, list[Any]] = dict(errors_body(refusal.errors))
    blockers = [e["msg"] for e in refusal.errors if e["loc"] == "blockers"]
    if blockers:
        found["blockers"] = blockers
    return found


def rolled_back(exc: BaseException) -> bool:
    """The database rolled the transaction back to break a deadlock or a serialization
    conflict (SQLSTATE 40P01, 40001): nothing of it was written, and taking it again is safe."""
    return getattr(exc.__cause__, "sqlstate", None) in {"40P01", "40001"}
