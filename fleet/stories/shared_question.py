"""One question, two tasks: two coders of one run stop on the same question, typed differently.

The invoice formatter asks first; the tax report's packet asks the same thing (case, spacing and
punctuation aside), so it joins the formatter's escalation instead of opening its own. The queue
shows one escalation with two tasks waiting; one answer reframes and releases both.
"""

from fleet.stories import Step, Story

RUN = "eu-invoices"
QUESTION = "Which currency do EU invoices use: euros for everyone, or each customer's own currency?"
SAME_QUESTION = (
    "which currency do EU invoices use — euros for everyone, or each customer's own currency?"
)
EVIDENCE = [
    {
        "kind": "query_result",
        "source": "SELECT DISTINCT currency FROM customers WHERE region = 'EU'",
        "datasource": "orders",
        "payload_hash": "sha256:" + "5e" * 32,
    }
]

TASKS = [
    {"key": "invoice-format", "title": "Format EU invoices", "agent": "billing-coder"},
    {"key": "tax-report", "title": "Monthly EU tax report", "agent": "tax-coder"},
    {"key": "ship", "title": "Ship the billing change", "agent": "invoicer",
     "prerequisites": ["invoice-format", "tax-report"]},
]  # fmt: skip


def packet(task: str, question: str, tried: str) -> dict[str, object]:
    return {
        "task": task,
        "tried": [tried],
        "ruled_out": [
            {"hypothesis": "the currency is stored per customer",
             "how": "customers has no currency column; the query returned no rows"},
        ],
        "evidence": EVIDENCE,
        "smallest_unblocking_question": question,
    }  # fmt: skip


STORY = Story(
    name="shared-question",
    title="Two tasks stop on one question",
    agents=(
        ("invoicer", "orchestration", True),
        ("billing-coder", "coding", False),
        ("tax-coder", "coding", False),
    ),
    steps=(
        Step("invoicer", "run.started", 0, {"run": RUN, "title": "EU invoices", "tasks": TASKS}),
        Step("billing-coder", "task.started", 1,
             {"run": RUN, "task": "invoice-format", "attempt": {"prompt_hash": "p:fmt", "context_hash": "c:eu"}}),
        Step("tax-coder", "task.started", 1,
             {"run": RUN, "task": "tax-report", "attempt": {"prompt_hash": "p:tax", "context_hash": "c:eu"}}),
        Step("billing-coder", "packet.submitted", 6,
             {"run": RUN, "task": "invoice-format",
              "packet": packet("invoice-format", QUESTION, "Format totals from customers.currency")}),
        Step("tax-coder", "packet.submitted", 9,
             {"run": RUN, "task": "tax-report",
              "packet": packet("tax-report", SAME_QUESTION, "Group tax lines by customers.currency")}),
    ),
)  # fmt: skip
