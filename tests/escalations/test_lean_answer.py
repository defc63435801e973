"""The answer's transaction costs at most 12 statements (besides the transaction's own), and one
that releases joined tasks a bounded number more, not a set per task where one write does all."""

import pytest
from django.db import connection
from django.test import TestCase
from django.test.utils import CaptureQueriesContext

from escalations.models import Escalation
from escalations.services import escalation_answer
from fleet.models import Delivery
from runs.context import next_attempt
from runs.models import Task
from tests.conftest import REFUSED_CALLBACK, on_postgres
from tests.escalations.desk import Desk
from tests.escalations.test_one_question import submit

pytestmark = pytest.mark.django_db
TRANSACTION = ("SAVEPOINT", "RELEASE SAVEPOINT", "BEGIN", "COMMIT")


@pytest.fixture
def desk_callback_url() -> str:
    return REFUSED_CALLBACK


def statements(escalation: Escalation, reviewer) -> list[str]:
    """The statements of the answer's transaction, up to its commit (what runs after commit
    belongs to a worker)."""
    with (
        TestCase.captureOnCommitCallbacks(execute=False),
        CaptureQueriesContext(connection) as queries,
    ):
        escalation_answer(escalation=escalation, reviewer=reviewer, text="Use the threshold")
    return [q["sql"] for q in queries.captured_queries if not q["sql"].startswith(TRANSACTION)]


def shown(sql: list[str]) -> str:
    return "\n".join(s[:160] for s in sql)


@pytest.fixture
def wide(desk: Desk) -> Desk:
    """The answered task has work waiting on it, in a run of 40 tasks."""
    tasks = [{"key": "plan", "agent": "planner"}]
    tasks += [{"key": f"w{i}", "agent": "coder", "prerequisites": ["plan"]} for i in range(39)]
    desk.run("wide", tasks)
    return desk


@pytest.mark.postgres
def test_a_plain_answer_costs_at_most_twelve_statements(wide, alice):
    assert on_postgres()
    escalation = wide.escalate("plan", run="wide")
    sql = statements(escalation, alice)
    assert len(sql) <= 12, shown(sql)
    # Nothing was left out to get there: the reframe and the answer's notice are recorded.
    assert Task.objects.get(run__key="wide", key="plan").state == "pending"
    assert set(Delivery.objects.values_list("type", flat=True)) >= {
        "task.reframed",
        "escalation.answered",
    }
    # task.reframed carries the whole context of the next attempt, as the context API gives it.
    task = Task.objects.get(run__key="wide", key="plan")
    data = Delivery.objects.get(type="task.reframed").payload["data"]
    context = next_attempt(task)
    assert (data["ground_truth"], data["scope"]) == (context["ground_truth"], context["scope"])
    assert data["ground_truth"][-1]["answer"] == "Use the threshold"


def answer_shared(desk: Desk, alice, prefix: str, joined: int) -> list[str]:
    """`joined` tasks of other runs wait on one escalation; the statements of its answer."""
    runs = [f"{prefix}{i}" for i in range(joined + 1)]
    for key in runs:
        desk.run(key, [{"key": "step", "agent": "coder"}])
    shared = submit(desk, runs[0]).json()["escalation"]
    for key in runs[1:]:
        assert submit(desk, key).json()["packet"] == "joined"
    sql = statements(Escalation.objects.get(pk=shared), alice)
    pending = Task.objects.filter(run__key__in=runs, key="step", state="pending")
    assert pending.count() == joined + 1
    reframed = Delivery.objects.filter(type="task.reframed", payload__data__run__in=runs)
    assert reframed.count() == joined + 1
    return sql


@pytest.mark.postgres
def test_an_answer_releasing_joined_tasks_costs_the_same_whatever_their_number(desk, alice):
    """One task or six waiting with it: the same statements, within the same budget."""
    assert on_postgres()
    one = answer_shared(desk, alice, "a", 1)
    six = answer_shared(desk, alice, "b", 6)
    assert len(one) <= 12, shown(one)
    assert len(six) == len(one), shown(six)
