"""What-if on a run: a manager takes capabilities down for N steps and sees the lab's comparison."""

from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from escalations.views.runs import run_for
from fleet.errors import Refusal
from runs import lab_runs

# The rows in the order the page shows them, with naive named for what it is.
LABELS = {"global_halt": "global halt", "scoped": "scoped", "naive": "ignoring the outage"}


@login_required
@require_GET
def what_if(request: HttpRequest, run_id: int) -> HttpResponse:
    found = run_for(request, run_id)
    down = [name for value in request.GET.getlist("down") for name in value.split(",")]
    steps = request.GET.get("steps", "")
    context: dict[str, Any] = {
        "choices": lab_runs.what_if_choices(run=found),
        "down": down,
        "steps": steps,
    }
    status = 200
    if not request.GET:  # the page itself, visited (a bookmark): the form, nothing refused yet
        return render(request, "escalations/what_if.html", {"run": found, "what_if": context})
    try:
        given = request.GET.getlist("steps")  # given twice is refused, as the API refuses it
        result = lab_runs.what_if(run=found, down=down, steps=given if len(given) > 1 else steps)
    except Refusal as refused:
        context["error"] = refused.message
        status = 422
    else:
        context["result"] = result
        context["rows"] = [(LABELS[p], result["policies"][p]) for p in LABELS]
        context["query"] = urlencode(  # the run's own fleet: a key may be in several
            {"down": ",".join(result["down"]), "steps": result["steps"], "fleet": found.fleet.name}
        )
    return render(
        request, "escalations/what_if.html", {"run": found, "what_if": context}, status=status
    )
