"""GET /api/v1/runs/<run>/escalations, and what an agent without a callback learns from an
escalation: the returned packet's note and the field it must fix, the answer."""

from fleet import services
from fleet.models import ApiToken
from tests.conftest import committed


def api(client, token, path):
    return client.get(f"/api/v1{path}", HTTP_AUTHORIZATION=f"Bearer {token}")


def test_a_run_lists_its_escalations_newest_first_with_what_each_needs(desk, client, browser):
    _, token = ApiToken.issue(desk.planner.agent)
    desk.run("two", [{"key": "plan", "agent": "planner"}, {"key": "ask", "agent": "coder"}])
    first = desk.escalate("plan", run="two")
    second = desk.escalate("ask", run="two")
    committed(
        browser.post,
        f"/escalations/{first.pk}/return/",
        {"field": "tried", "note": "say which tier sources you searched"},
    )
    rows = api(client, token, "/runs/two/escalations").json()
    assert [row["id"] for row in rows] == [second.pk, first.pk]
    returned = rows[1]
    assert (returned["task"], returned["status"], returned["missing"], returned["note"]) == (
        "plan",
        "returned",
        ["tried"],
        "tried: say which tier sources you searched",
    )
    assert returned["question"] and returned["drafted"] is False and returned["answer"] is None
    detail = api(client, token, f"/escalations/{first.pk}").json()
    assert (detail["missing"], detail["note"]) == (
        ["tried"],
        "tried: say which tier sources you searched",
    )

    committed(browser.post, f"/escalations/{second.pk}/answer/", {"text": "Use loyalty_points"})
    answered = api(client, token, "/runs/two/escalations").json()[0]
    assert answered["status"] == "answered"
    assert (answered["answer"]["text"], answered["answer"]["by"]) == ("Use loyalty_points", "alice")
    assert (answered["missing"], answered["note"]) == ([], None)


def test_a_run_with_no_escalation_lists_none(desk, client):
    _, token = ApiToken.issue(desk.planner.agent)
    assert api(client, token, "/runs/tier-discounts/escalations").json() == []


def test_another_fleets_run_or_no_token_is_refused(desk, client):
    response = api(client, "bhk_wrong", "/runs/tier-discounts/escalations")
    assert response.status_code == 401
    assert response.json()["errors"][0]["loc"] == "authorization"
    _, token = ApiToken.issue(desk.planner.agent)
    missing = api(client, token, "/runs/no-such-run/escalations")
    assert missing.status_code == 404
    assert missing.json() == {"errors": [{"loc": "path", "msg": "no run 'no-such-run'"}]}
    other = services.fleet_create(name="other")
    stranger, _, stranger_token = services.agent_create(fleet=other, name="stranger")
    hidden = api(client, stranger_token, "/runs/tier-discounts/escalations")
    assert hidden.status_code == 404  # another fleet's run is not found, not forbidden


def test_the_openapi_document_describes_the_webhook_its_events_and_the_notifications(client):
    doc = client.get("/api/v1/openapi.json").json()
    schemas = doc["components"]["schemas"]
    events = doc["paths"]["/hooks/v1/agents/{agent_id}/events"]["post"]
    body = events["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/WebhookEvent"}
    kinds = schemas["WebhookEvent"]["discriminator"]["mapping"]
    assert set(kinds) == {
        "run.started", "tasks.added", "task.started", "claim.posted", "claim.checked",
        "task.finished", "capability.changed", "packet.submitted",
    }  # fmt: skip
    for kind, ref in kinds.items():
        event = schemas[ref.rsplit("/", 1)[-1]]
        assert event["properties"]["type"] == {"const": kind}
        data = schemas[event["properties"]["data"]["$ref"].rsplit("/", 1)[-1]]
        assert data["examples"] and data["additionalProperties"] is False, kind
    assert set(schemas["TaskStartedData"]["required"]) == {"run", "task", "attempt"}
    responses = events["responses"]
    assert set(responses) == {
        "202",
        "400",
        "401",
        "403",
        "409",
        "411",
        "413",
        "415",
        "422",
        "429",
        "503",
    }
    for status, answer in responses.items():
        ref = answer["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/Accepted" if status == "202" else "/Errors"), status
    assert {p["name"] for p in events["parameters"]} == {
        "webhook-id", "webhook-timestamp", "webhook-signature", "agent_id"
    }  # fmt: skip
    batch = doc["paths"]["/hooks/v1/agents/{agent_id}/batches"]["post"]
    assert schemas["Batch"]["properties"]["events"]["maxItems"] == 500
    assert "200" in batch["responses"]
    assert set(doc["webhooks"]) >= {"task.ready", "task.reframed", "task.halted", "run.failed"}
    halted = schemas["TaskHaltedNotification"]
    assert "ground_truth" in halted["properties"]["data"]["properties"]
