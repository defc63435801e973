"""Builders for the desk's tests: a fleet's run with an escalated task, and the people at the desk."""

from typing import Any

from django.contrib.auth.models import User

from escalations.models import Escalation
from fleet import services
from fleet.models import Fleet
from tests.conftest import Sender, make_sender

QUESTION = (
    "Where does a customer's tier come from today: a new column we should add, "
    "or the loyalty_points threshold in pricing-config.yaml?"
)
HASH = "sha256:" + "9f3a" * 16
OPTIONS = ["Add a customer_tier column", "Use the loyalty_points threshold"]


def packet(task: str = "plan", **changes: Any) -> dict[str, Any]:
    """The seed's failure packet (Control 3), for `task`."""
    content: dict[str, Any] = {
        "task": task,
        "tried": [
            "Resolve discount rule via customers.customer_tier (from plan)",
            "Reframed with live schema from information_schema",
        ],
        "ruled_out": [
            {
                "hypothesis": "column exists under another name",
                "how": "searched customers, accounts, loyalty_* for tier-like columns; none found",
            },
            {
                "hypothesis": "tier is computed elsewhere",
                "how": "grep for 'tier' in services/ and db/migrations; no producer found",
            },
        ],
        "evidence": [
            {
                "kind": "query_result",
                "source": "SELECT column_name FROM information_schema.columns WHERE table_name = 'customers'",
                "payload_hash": HASH,
            }
        ],
        "smallest_unblocking_question": QUESTION,
    }
    content.update(changes)
    return {k: v for k, v in content.items() if v is not None}


def question_for(run: str, task: str) -> str:
    """The seed's question, asked for one task of one run."""
    return f"{QUESTION[:-1]} (for {task} of {run})?"


class Desk:
    """A fleet with an orchestrator and a coder, and runs posted through the signed webhook."""

    def __init__(self, client: Any, fleet: Fleet) -> None:
        self.fleet = fleet
        self.planner: Sender = make_sender(
            client, fleet, "planner", role="planning", orchestrator=True
        )
        self.coder: Sender = make_sender(client, fleet, "coder", role="coding")
        self.coder_b: Sender = make_sender(client, fleet, "coder-b", role="coding")

    def run(self, key: str = "tier-discounts", tasks: list[dict[str, Any]] | None = None) -> None:
        tasks = tasks or [
            {"key": "plan", "agent": "planner", "title": "Plan the tier discount"},
            {"key": "discount-resolver", "agent": "coder", "prerequisites": ["plan"]},
            {
                "key": "api-change",
                "agent": "coder-b",
                "prerequisites": ["plan"],
                "capabilities": ["forge"],
            },
        ]
        response = self.planner.post("run.started", {"run": key, "tasks": tasks})
        assert response.status_code == 202, response.content

    def escalate(
        self,
        task: str = "plan",
        *,
        run: str = "tier-discounts",
        timestamp: str | None = None,
        **packet_changes: Any,
    ) -> Escalation:
        started = self.planner.post(
            "task.started",
            {
                "run": run,
                "task": task,
                "agent": self.agent_of(run, task),
                # A new prompt each attempt, as a reframe (an answer) requires.
                "attempt": {
                    "prompt_hash": f"p{self.attempts(run, task) + 1}",
                    "context_hash": "c1",
                },
            },
            timestamp=timestamp,
        )
        assert started.status_code == 202, started.content
        if (run, task) != ("tier-discounts", "plan"):
            # Each task its own question, unless a test asks for the same one: packets that ask
            # the same question wait on one escalation (tests/escalations/test_one_question.py).
            packet_changes.setdefault("smallest_unblocking_question", question_for(run, task))
        submitted = self.planner.post(
            "packet.submitted",
            {
                "run": run,
                "task": task,
                "agent": self.agent_of(run, task),
                "packet": packet(task, **packet_changes),
            },
            timestamp=timestamp,
        )
        assert submitted.status_code == 202, submitted.content
        return Escalation.objects.get(pk=submitted.json()["escalation"])

    def attempts(self, run: str, task: str) -> int:
        from runs.models import Attempt

        return Attempt.objects.filter(task__run__key=run, task__key=task).count()

    def agent_of(self, run: str, task: str) -> str:
        from runs.models import Task

        return Task.objects.get(run__fleet=self.fleet, run__key=run, key=task).agent.name


def member(username: str, fleet: Fleet, role: str = "reviewer") -> User:
    user, _ = services.member_add(username=username, fleet=fleet, role=role)
    user.set_password("correct horse battery staple")
    user.save()
    return user
