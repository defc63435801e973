"""The bearer-token read API: runs, frontier, context, escalations, OpenAPI."""

import pytest

from fleet import services
from fleet.models import ApiToken
from tests.conftest import make_sender, task

pytestmark = pytest.mark.django_db


def get(client, path: str, token: str | None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return client.get(path, **headers)


def test_a_posted_run_reads_back_with_its_tasks_and_states(client, planner, coder, token):
    tasks = [task(f"t{i}", prerequisites=[f"t{i - 1}"] if i else []) for i in range(20)]
    assert (
        planner.post("run.started", {"run": "r1", "title": "Twenty", "tasks": tasks}).status_code
        == 202
    )
    response = get(client, "/api/v1/runs/r1", token)
    assert response.status_code == 200
    body = response.json()
    assert body["run"] == "r1" and body["title"] == "Twenty" and body["state"] == "running"
    assert [t["key"] for t in body["tasks"]] == [f"t{i}" for i in range(20)]
    assert {t["state"] for t in body["tasks"]} == {"pending"}
    assert body["tasks"][0]["ready"] is True
    assert body["tasks"][1]["blockers"] == ["prerequisite:t0"]


def test_the_frontier_lists_ready_and_deferred_tasks(client, planner, coder, token):
    tasks = [
        task("local"),
        task("push", capabilities=["forge"]),
        task("after", prerequisites=["push"]),
    ]
    planner.post("run.started", {"run": "r1", "tasks": tasks})
    planner.post(
        "capability.changed", {"capability": "forge", "status": "down", "reason": "outage"}
    )
    body = get(client, "/api/v1/runs/r1/frontier", token).json()
    assert body == {
        "policy": "scoped",
        "ready": ["local"],
        "deferred": [
            {"task": "after", "blockers": ["prerequisite:push"]},
            {"task": "push", "blockers": ["capability:forge"]},
        ],
    }


def test_the_api_needs_a_valid_bearer_token(client, planner, coder):
    planner.post("run.started", {"run": "r1", "tasks": [task("a")]})
    for token in (None, "bhk_wrong"):
        response = get(client, "/api/v1/runs/r1", token)
        assert response.status_code == 401
        assert response.json()["errors"][0]["loc"] == "authorization"


def test_a_run_of_another_fleet_is_404(client, planner, coder):
    planner.post("run.started", {"run": "r1", "tasks": [task("a")]})
    other = services.fleet_create(name="other")
    stranger = make_sender(client, other, "stranger")
    from fleet.models import ApiToken

    _, plain = ApiToken.issue(stranger.agent)
    response = get(client, "/api/v1/runs/r1", plain)
    assert response.status_code == 404
    assert response.json()["errors"][0]["msg"] == "no run 'r1'"


def test_an_unknown_task_context_is_404(client, planner, coder, token):
    planner.post("run.started", {"run": "r1", "tasks": [task("a")]})
    assert get(client, "/api/v1/runs/r1/tasks/a/context", token).json()["task"] == "a"
    assert get(client, "/api/v1/runs/r1/tasks/zzz/context", token).status_code == 404


def test_openapi_describes_the_api(client):
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert "/api/v1/runs/{run}" in paths
    assert "/api/v1/runs/{run}/frontier" in paths
    assert "/api/v1/runs/{run}/tasks/{task}/context" in paths
    assert "/api/v1/escalations/{escalation_id}" in paths


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_a_method_an_api_route_does_not_take_is_a_json_405_naming_the_allowed_ones(
    client, token, method
):
    response = client.generic(method, "/api/v1/runs/r1", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 405
    assert response["Allow"] == "GET"
    assert response.json() == {
        "errors": [{"loc": "method", "msg": f"{method} is not allowed here; use GET"}]
    }


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
@pytest.mark.parametrize("path", ["/api/v1/openapi.json", "/api/v1/docs"])
def test_the_api_documents_are_read_only_a_json_405_not_a_form_page(method, path):
    from django.test import Client

    response = Client(enforce_csrf_checks=True).generic(method, path)
    assert response.status_code == 405
    assert response["Allow"] == "GET"
    assert response.json() == {
        "errors": [{"loc": "method", "msg": f"{method} is not allowed here; use GET"}]
    }


def test_head_on_the_api_is_the_get_without_its_body(client, planner, coder, token):
    planner.post("run.started", {"run": "r1", "tasks": [task("a"), task("b")]})
    for path in ("/api/v1/runs/r1", "/api/v1/runs/r1/frontier", "/api/v1/runs/r1/tasks/a/context"):
        got = get(client, path, token)
        head = client.head(path, HTTP_AUTHORIZATION=f"Bearer {token}")
        assert (head.status_code, head["Content-Type"]) == (200, got["Content-Type"])
        assert head["Content-Length"] == str(len(got.content))
        assert head.content == b""
    assert client.head("/api/v1/runs/r1").status_code == 401  # its token is still asked for
    assert client.head("/api/v1/runs/zzz", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 404


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/runs/%00",
        "/api/v1/runs/r1%00",
        "/api/v1/runs/r1%00/frontier",
        "/api/v1/runs/r1%00/escalations",
        "/api/v1/runs/r1/tasks/a%00b/context",
        "/api/v1/runs/%00/what-if?down=forge&steps=2",
    ],
)
def test_a_key_with_a_nul_byte_names_nothing_a_json_404(client, planner, coder, token, path):
    planner.post("run.started", {"run": "r1", "tasks": [task("a")]})
    response = get(client, path, token)
    assert response.status_code == 404
    assert response.json()["errors"][0]["loc"] == "path"


def test_the_what_ifs_capabilities_and_steps_are_documented_as_required(client):
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    parameters = paths["/api/v1/runs/{run}/what-if"]["get"]["parameters"]
    asked = {p["name"]: p for p in parameters if p["in"] == "query"}
    assert asked["down"]["required"] is True and asked["steps"]["required"] is True
    assert "default" not in asked["down"]["schema"] and "default" not in asked["steps"]["schema"]


def test_a_person_in_two_fleets_names_the_fleet_of_a_run_key_both_have(client, planner, coder):
    """Before, the API answered with one of the two runs, whichever the database gave first:
    the what-if page's link then answered for the other fleet's run."""
    other = services.fleet_create(name="zeta")
    zeta = make_sender(client, other, "zplanner", orchestrator=True)
    planner.post("run.started", {"run": "same", "title": "Acme's", "tasks": [task("a")]})
    zeta.post(
        "run.started", {"run": "same", "title": "Zeta's", "tasks": [task("z", agent="zplanner")]}
    )
    both, _ = services.member_add(username="both", fleet=planner.agent.fleet, role="manager")
    services.member_add(username="both", fleet=other, role="manager")
    client.force_login(both)

    ambiguous = client.get("/api/v1/runs/same")
    assert ambiguous.status_code == 409
    assert ambiguous.json()["errors"][0]["msg"] == (
        "run 'same' is in several of your fleets (acme, zeta): name one with ?fleet=<name>"
    )
    assert client.get("/api/v1/runs/same/frontier").status_code == 409
    assert client.get("/api/v1/runs/same", {"fleet": "zeta"}).json()["title"] == "Zeta's"
    assert client.get("/api/v1/runs/same", {"fleet": "acme"}).json()["title"] == "Acme's"
    frontier = client.get("/api/v1/runs/same/frontier", {"fleet": "zeta"}).json()
    assert frontier["ready"] == ["z"]
    context = client.get("/api/v1/runs/same/tasks/z/context", {"fleet": "zeta"})
    assert context.status_code == 200
    assert client.get("/api/v1/runs/same/escalations", {"fleet": "zeta"}).json() == []
    unknown = client.get("/api/v1/runs/same", {"fleet": "nowhere"})
    assert unknown.status_code == 404
    assert unknown.json()["errors"][0]["msg"] == "no run 'same' in fleet 'nowhere'"
    nul = client.get("/api/v1/runs/same", {"fleet": "zeta\x00"})
    assert nul.status_code == 404
    assert nul.json()["errors"][0]["msg"] == "no run 'same' in fleet 'zeta\\x00'"
    # An agent's token reads its own fleet's run, never the other's.
    token = ApiToken.issue(zeta.agent)[1]
    assert get(client, "/api/v1/runs/same", token).json()["title"] == "Zeta's"
    assert get(client, "/api/v1/runs/same?fleet=acme", token).status_code == 404
