"""After an attempt: run the retry policy, store the decision and act on it (the retry policy issue)."""


def after_attempt(attempt_id: int) -> None:
    """Not built yet: the retry policy issue wires runs.policy here."""


def act_on_decision(decision_id: int) -> None:
    """Not built yet: the retry policy issue carries out due decisions here."""
