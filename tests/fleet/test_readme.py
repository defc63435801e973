"""The README's first-event example works as printed, and the run shows in the admin and the API."""

import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from fleet.models import ApiToken
from runs.models import Run

README = Path(__file__).resolve().parents[2] / "README.md"


def examples(language: str = "python") -> list[str]:
    text = README.read_text()
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


@pytest.mark.django_db(transaction=True)
def test_the_readme_quick_start_runs_a_first_task_with_the_client(
    live_server, planner, client, capsys
):
    code, _ = examples()
    _, token = ApiToken.issue(planner.agent)
    code = code.replace(
        "http://127.0.0.1:8000/hooks/v1/agents/<id>/events", f"{live_server.url}{planner.path}"
    )
    code = code.replace('secret="whsec_…"', f'secret="{planner.secret}"')
    code = code.replace('token="bhk_…"', f'token="{token}"')
    assert len([line for line in code.splitlines() if line.strip()]) <= 10, "a ten-line start"
    exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - the README's own example
    assert capsys.readouterr().out.splitlines() == ["['step-0']", "['step-1']"]
    run = Run.objects.get(key="first-run")
    assert run.tasks.count() == 20
    assert run.tasks.get(key="step-0").state == "succeeded"


@pytest.mark.django_db(transaction=True)
def test_the_python_clients_readme_example_runs_after_the_quick_start(live_server, planner, capsys):
    """A newcomer runs the README's quick start, then the client's README on the same agent:
    the client's example declares a run of its own, so it is not refused as a redeclaration."""
    _, token = ApiToken.issue(planner.agent)
    client_readme = (README.parent / "clients" / "python" / "README.md").read_text()
    [client_code] = re.findall(r"```python\n(.*?)```", client_readme, re.S)
    for code in (examples()[0], client_code):
        code = code.replace(
            "http://127.0.0.1:8000/hooks/v1/agents/<id>/events", f"{live_server.url}{planner.path}"
        )
        code = code.replace('secret="whsec_…"', f'secret="{planner.secret}"')
        code = code.replace('token="bhk_…"', f'token="{token}"')
        exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - the READMEs' own examples
    run = Run.objects.exclude(key="first-run").get()
    assert run.tasks.get(key="plan").state == "succeeded"
    assert [claim.key for claim in run.claims.all()] == ["plan.source"]


@pytest.mark.django_db(transaction=True)
def test_the_readme_example_posts_a_run_of_twenty_tasks(live_server, planner, client, capsys):
    _, code = examples()
    code = code.replace(
        "http://127.0.0.1:8000/hooks/v1/agents/<id>/events", f"{live_server.url}{planner.path}"
    )
    code = code.replace('SECRET = "whsec_…"', f'SECRET = "{planner.secret}"')
    exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - the README's own example
    assert "202" in capsys.readouterr().out
    run = Run.objects.get(key="first-run")
    assert run.tasks.count() == 20

    _, token = ApiToken.issue(planner.agent)
    body = client.get("/api/v1/runs/first-run", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert len(body["tasks"]) == 20

    admin = get_user_model().objects.create_superuser("root", password="pw-for-tests")
    client.force_login(admin)
    page = client.get(f"/admin/runs/run/{run.pk}/change/")
    assert page.status_code == 200
    assert "step-19" in page.content.decode()


ADMIN_PAGES = [
    "fleet/fleet", "fleet/agent", "fleet/capability", "fleet/verificationsource", "fleet/membership",
    "fleet/event", "fleet/delivery", "runs/run", "runs/task", "runs/attempt", "runs/claim",
    "runs/claimuse", "runs/artifact", "runs/decision", "runs/blocker", "runs/progressline",
    "escalations/failurepacket", "escalations/escalation", "escalations/answer",
    "escalations/channel", "escalations/pool", "escalations/routingrule", "escalations/duerule",
    "escalations/assignment", "escalations/escalationstep", "escalations/message",
]  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize("page", ADMIN_PAGES)
def test_every_model_has_a_working_admin(client, planner, coder, page):
    planner.post("run.started", {"run": "r1", "tasks": [{"key": "a", "agent": "coder"}]})
    admin = get_user_model().objects.create_superuser("root", password="pw-for-tests")
    client.force_login(admin)
    assert client.get(f"/admin/{page}/").status_code == 200
    assert client.get(f"/admin/{page}/add/").status_code in (200, 403)
