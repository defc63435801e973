"""import_events records a past run as it happened, so its blast radius can be measured."""

import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from fleet.models import Event
from runs.claims.hashing import payload_hash
from runs.models import Artifact, Claim, ClaimUse, Run, Task
from tests.fixtures.seed import ALL_GREEN_RUN

pytestmark = pytest.mark.django_db

RUN = "tier-discounts"
EVENTS = 16  # lines of the all-green run


def import_file(path: Path | str, fleet: str = "acme") -> dict:
    out = io.StringIO()
    call_command("import_events", fleet, str(path), stdout=out)
    return json.loads(out.getvalue())


def failing_import(path: Path, fleet: str = "acme") -> tuple[str, dict]:
    out = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("import_events", fleet, str(path), stdout=out)
    return str(raised.value), json.loads(out.getvalue())


def lines_of(path: Path = ALL_GREEN_RUN) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write(tmp_path: Path, envelopes: list[dict | str]) -> Path:
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(e if isinstance(e, str) else json.dumps(e) for e in envelopes) + "\n")
    return path


def test_the_fixtures_evidence_hashes_are_what_an_agent_would_compute():
    for envelope in lines_of():
        data = envelope["data"]
        evidence = data.get("evidence") or (data.get("claim") or {}).get("evidence")
        if isinstance(evidence, dict):
            assert payload_hash(evidence["payload"]) == evidence["payload_hash"]


def test_the_all_green_run_reports_3_agents_4_prs_and_40_minutes(client, seed):
    printed = import_file(ALL_GREEN_RUN)

    assert printed == {
        "fleet": "acme",
        "file": str(ALL_GREEN_RUN),
        "lines": EVENTS,
        "applied": EVENTS,
        "skipped": 0,
        "errors": [],
        "runs": [RUN],
    }
    body = seed.get(client, f"/api/v1/runs/{RUN}").json()
    claims = {c["key"]: c for c in body["claims"]}
    assert claims["plan.customer-tier"]["status"] == "refuted"
    assert claims["plan.customer-tier"]["blast_radius"] == {
        "agents": 3,
        "artifacts": 4,
        "minutes": 40.0,
        "tasks": ["api-change", "api-tests", "confirm-schema", "discount-resolver"],
    }
    # Everyone was green: every task succeeded and 4 PRs were opened.
    assert {t["state"] for t in body["tasks"]} == {"succeeded"}
    assert Artifact.objects.filter(kind="pull_request").count() == 4
    assert claims["tests.pass"]["status"] == "verified"
    assert claims["tests.pass"]["blast_radius"]["minutes"] == 1.0
    assert claims["schema.customer-tier-confirmed"]["status"] == "unverified"
    assert (
        claims["schema.customer-tier-confirmed"]["reason"] == "another agent's text is not evidence"
    )


def test_it_records_the_envelope_timestamps_as_the_event_times(seed):
    import_file(ALL_GREEN_RUN)

    run = Run.objects.get()
    assert run.imported and run.started_at.isoformat() == "2026-06-02T09:00:00+00:00"
    claim = Claim.objects.get(key="plan.customer-tier")
    assert claim.posted_at.isoformat() == "2026-06-02T09:01:00+00:00"
    assert claim.checked_at.isoformat() == "2026-06-02T09:41:00+00:00"
    assert claim.checked_by == "agent:planner"
    started = dict(Task.objects.values_list("key", "started_at"))
    assert started["api-tests"].isoformat() == "2026-06-02T09:20:00+00:00"
    uses = {
        (u.claim.key, u.task.key): u.at.minute
        for u in ClaimUse.objects.select_related("claim", "task")
    }
    assert uses == {
        ("plan.customer-tier", "confirm-schema"): 2,
        ("plan.customer-tier", "discount-resolver"): 6,
        ("schema.customer-tier-confirmed", "discount-resolver"): 6,
        ("schema.customer-tier-confirmed", "api-change"): 7,
    }
    assert Event.objects.filter(fleet=seed.fleet).count() == EVENTS
    assert Event.objects.order_by("occurred_at").last().type == "claim.checked"


def test_what_happened_is_recorded_not_refused_by_the_gate(seed):
    """The coders started on unverified claims: in a live run the gate would have said 409."""
    import_file(ALL_GREEN_RUN)

    assert Task.objects.get(key="discount-resolver").started_at is not None
    # Imported evidence is history: nothing is sent to a verifier now.
    assert not Claim.objects.filter(verification_pending=True).exists()


def test_importing_the_same_file_again_applies_nothing_twice(seed):
    import_file(ALL_GREEN_RUN)

    again = import_file(ALL_GREEN_RUN)

    assert (again["applied"], again["skipped"], again["errors"]) == (0, EVENTS, [])
    assert Event.objects.count() == EVENTS
    assert Claim.objects.count() == 3 and Artifact.objects.count() == 4


def test_a_file_that_grew_applies_only_its_new_lines(seed, tmp_path):
    envelopes = lines_of()
    import_file(write(tmp_path, envelopes[:10]))

    printed = import_file(write(tmp_path, envelopes))

    assert (printed["applied"], printed["skipped"]) == (EVENTS - 10, 10)
    assert Claim.objects.get(key="plan.customer-tier").status == "refuted"


def test_a_bad_line_is_named_and_nothing_of_the_file_is_applied(seed, tmp_path):
    envelopes = lines_of()
    envelopes[6]["data"]["task"] = "confirm-schemas"  # line 7: a task the run does not have

    message, printed = failing_import(write(tmp_path, envelopes))

    assert message == (
        "line 7: data.task: unknown task 'confirm-schemas' in run 'tier-discounts'; "
        "nothing of the file was imported"
    )
    assert printed["errors"] == [
        {
            "line": 7,
            "loc": "data.task",
            "msg": "unknown task 'confirm-schemas' in run 'tier-discounts'",
        }
    ]
    assert printed["applied"] == 0
    assert not Run.objects.exists() and not Event.objects.exists() and not Claim.objects.exists()


def test_every_malformed_line_is_named_before_anything_is_applied(seed, tmp_path):
    envelopes: list[dict | str] = list(lines_of())
    envelopes[1] = "{not json"
    envelopes[3] = {k: v for k, v in lines_of()[3].items() if k != "agent"}
    envelopes[4] = {**lines_of()[4], "agent": "ghost"}
    envelopes[5] = {**lines_of()[5], "type": "claim.shouted"}
    envelopes[7] = "[1, 2]"

    message, printed = failing_import(write(tmp_path, envelopes))

    by_line = {e["line"]: e for e in printed["errors"]}
    assert sorted(by_line) == [2, 4, 5, 6, 8]
    assert by_line[2]["loc"] == "body" and by_line[2]["msg"].startswith("not valid JSON")
    assert by_line[4] == {
        "line": 4,
        "loc": "agent",
        "msg": "required: the name of the agent that sent it",
    }
    assert by_line[5] == {"line": 5, "loc": "agent", "msg": "no agent 'ghost' in fleet 'acme'"}
    assert by_line[6]["loc"] == "type"
    assert by_line[8]["msg"].startswith("must be a JSON object")
    assert message.startswith("line 2: body: not valid JSON") and "(and 4 more errors)" in message
    assert not Event.objects.exists()


def test_nan_or_a_number_too_large_in_a_line_is_named_not_stored(seed, tmp_path):
    envelopes: list[dict | str] = list(lines_of())
    # Line 6 carries the schema agent's evidence payload: NaN is not JSON, 1e999 no double.
    envelopes[5] = json.dumps(lines_of()[5]).replace('"lines": [3, 3]', '"lines": [NaN, 3]')
    envelopes[12] = json.dumps(lines_of()[12]).replace('"exit_code": 0', '"exit_code": 1e999')

    message, printed = failing_import(write(tmp_path, envelopes))

    assert printed["errors"] == [
        {"line": 6, "loc": "body", "msg": "not valid JSON: NaN is not a JSON value"},
        {
            "line": 13,
            "loc": "data.claim.evidence.payload.exit_code",
            "msg": "is a number outside the range of a double",
        },
    ]
    assert message.endswith("nothing of the file was imported")
    assert not Event.objects.exists()


def test_blank_lines_are_ignored(seed, tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text("\n\n" + ALL_GREEN_RUN.read_text().replace("\n", "\n\n"))

    assert import_file(path)["applied"] == EVENTS


def test_an_unknown_fleet_or_an_unreadable_file_is_refused(seed, tmp_path):
    with pytest.raises(CommandError, match="no fleet named 'ghost'"):
        import_file(ALL_GREEN_RUN, fleet="ghost")
    with pytest.raises(CommandError, match=r"cannot read .*nowhere.jsonl: No such file"):
        import_file(tmp_path / "nowhere.jsonl")


def test_a_line_over_the_webhooks_size_limit_is_refused(seed, tmp_path, settings):
    settings.WEBHOOK_MAX_BODY_BYTES = 300

    message, printed = failing_import(write(tmp_path, lines_of()))

    assert message.startswith("line 1: body: larger than the limit of 300 bytes")
    assert not Event.objects.exists()


def test_an_imported_check_citing_another_agent_is_recorded_but_changes_nothing(seed, tmp_path):
    envelopes = lines_of()
    check = envelopes[-1]
    check["data"]["evidence"] = {**check["data"]["evidence"], "source": "agent:coder-a"}

    printed = import_file(write(tmp_path, envelopes))

    assert printed["errors"] == []
    claim = Claim.objects.get(key="plan.customer-tier")
    assert claim.status == "unverified" and claim.checked_at is None
    row = claim.evidence.get(role="check")
    assert row.verdict_reason == "not accepted: another agent's text is not evidence"


def test_an_imported_run_finished_when_its_last_task_did_and_is_not_announced(seed):
    from fleet.models import Delivery

    seed.fleet.callback_url = "http://127.0.0.1:9/hooks"
    seed.fleet.save()
    from django.test import TestCase

    with TestCase.captureOnCommitCallbacks(execute=True):
        import_file(ALL_GREEN_RUN)

    run = Run.objects.get()
    assert run.state == "succeeded"
    assert run.finished_at.isoformat() == "2026-06-02T09:32:00+00:00"  # api-tests, the last
    assert not Delivery.objects.filter(type="run.succeeded").exists()
