"""After an attempt: run the retry policy, store the decision and act on it (the retry policy issue)."""

from typing import Any


def after_attempt(attempt_id: int) -> None:
    """Not built yet: the retry policy issue wires runs.policy here."""


def act_on_decision(decision_id: int) -> None:
    """Not built yet: the retry policy issue carries out due decisions here."""


def claim_refuted(*, claim: Any, reality: list[dict[str, Any]]) -> Any:
    """A refuted claim is a loud failure of the task that posted it: hand it to the retry policy.

    Called inside the verifying transaction. `reality` is the checker's evidence (the real payloads),
    which becomes the ground truth of the producing task's reframed next attempt. Returns the
    Decision. Not built yet: the retry policy issue implements it.
    """
    return None
