"""schemathesis against the read API's own OpenAPI document: no generated case gets a 5xx, and
every refusal is the JSON errors body."""

from urllib.parse import urlencode

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import task

# The read API's operations; the signed webhook it also documents has its own fuzzer
# (tests/fleet/test_webhook_fuzz.py), which signs what it sends.
schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", get_wsgi_application()).include(
    path_regex=r"^/api/v1/"
)


# One test per operation, named by it: schemathesis's own items share one name, which a
# parallel run (pytest-xdist, a file to a worker) would run once instead of once per operation.
OPERATIONS = [result.ok() for result in schema.get_all_operations()]


@pytest.mark.parametrize("operation", OPERATIONS, ids=[o.label for o in OPERATIONS])
@settings(
    max_examples=30,
    derandomize=True,  # the same cases every run: CI is repeatable
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_the_read_api_answers_every_generated_case_without_a_5xx(
    operation, data, client, planner, coder, token
):
    case = data.draw(operation.as_strategy())
    planner.post("run.started", {"run": "r1", "tasks": [task("a"), task("b", prerequisites=["a"])]})
    # Through Django's test client: the test's transaction stays open across the request.
    response = client.generic(
        case.method,
        case.formatted_path,
        QUERY_STRING=urlencode(case.query or {}, doseq=True),
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code < 500, (case.method, case.formatted_path, response.content)
    if response.status_code >= 400:
        assert response["Content-Type"].startswith("application/json"), (
            case.formatted_path,
            response,
        )
        errors = response.json()["errors"]
        assert errors and all(set(e) == {"loc", "msg"} for e in errors), errors
