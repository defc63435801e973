"""The manager reports: blast radius, handoffs, escalation health and retries, and their CSV."""

import csv
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from escalations.selectors.radius import handoffs_for_fleet
from escalations.selectors.reports import (
    escalation_health,
    report_runs,
    retry_rows,
    timeliness_report,
)
from escalations.views.pages import HtmxHttpRequest, login_required
from fleet.access import managed_fleet_ids
from fleet.models import Fleet

WINDOWS = {"7": 7, "30": 30, "90": 90, "all": None}


def report_scope(request: HtmxHttpRequest) -> tuple[list[int], dict[str, Any]]:
    """The fleets the person manages (narrowed by ?fleet=) and the window (?days=)."""
    managed = managed_fleet_ids(request.user)
    fleets = dict(Fleet.objects.filter(pk__in=managed).order_by("name").values_list("name", "pk"))
    chosen = request.GET.get("fleet", "")
    ids = [fleets[chosen]] if chosen in fleets else list(fleets.values())
    # All of it unless narrowed: a first look should include the past runs a fleet imported.
    days = request.GET.get("days", "all")
    if days not in WINDOWS:
        days = "all"
    window = WINDOWS[days]
    since = timezone.now() - timedelta(days=window) if window is not None else None
    return ids, {
        "fleets": list(fleets),
        "fleet": chosen if chosen in fleets else "",
        "days": days,
        "since": since,
        "managed": bool(managed),
        "windows": [
            ("7", "Last 7 days"),
            ("30", "Last 30 days"),
            ("90", "Last 90 days"),
            ("all", "All time"),
        ],
        "query": urlencode({k: v for k, v in (("fleet", chosen), ("days", days)) if v}),
    }


def report_data(request: HtmxHttpRequest) -> dict[str, Any]:
    ids, scope = report_scope(request)
    now = timezone.now()
    runs = report_runs(ids, since=scope["since"], now=now)
    return {
        **scope,
        "runs": runs,
        "handoffs": handoffs_for_fleet(ids, since=scope["since"], now=now) if ids else [],
        "health": escalation_health(ids, since=scope["since"], runs=runs),
        "retries": retry_rows(ids, since=scope["since"]),
        "timeliness": timeliness_report(ids, since=scope["since"], now=now),
        "chart": {
            "labels": [f"{r['run'].key} ({r['run'].started_at:%Y-%m-%d})" for r in runs],
            "minutes": [r["minutes"] for r in runs],
            "agents": [r["agents"] for r in runs],
            "artifacts": [r["artifacts"] for r in runs],
        },
    }


def managers_only(request: HtmxHttpRequest) -> HttpResponse | None:
    if managed_fleet_ids(request.user):
        return None
    return render(request, "escalations/reports_forbidden.html", status=403)


@login_required
@require_GET
def reports_page(request: HtmxHttpRequest) -> HttpResponse:
    refused = managers_only(request)
    if refused is not None:
        return refused
    return render(request, "escalations/reports.html", report_data(request))


CSV_TABLES = ("runs", "handoffs", "escalations", "retries")


# A spreadsheet runs a cell starting with one of these as a formula (OWASP, CSV injection); run,
# task and claim keys are the agents' words.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class CsvWriter:
    """csv.writer, with minutes to one decimal and yes/no for flags, as the page shows them, and
    text that a spreadsheet would run as a formula kept as text (a leading single quote)."""

    def __init__(self, response: HttpResponse) -> None:
        self.out = csv.writer(response)

    @staticmethod
    def cell(value: Any) -> Any:
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, float):
            return f"{value:.1f}"
        if isinstance(value, str) and value.startswith(FORMULA_STARTS):
            return "'" + value
        return "" if value is None else value

    def writerow(self, row: list[Any]) -> None:
        self.out.writerow([self.cell(value) for value in row])


@login_required
@require_GET
def reports_csv(request: HtmxHttpRequest, table: str) -> HttpResponse:
    refused = managers_only(request)
    if refused is not None:
        return refused
    if table not in CSV_TABLES:
        raise Http404(f"no report table {table!r}")
    data = report_data(request)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="bulkhead-{table}.csv"'
    out = CsvWriter(response)
    if table == "runs":
        out.writerow(["fleet", "run", "started_at", "state", "claims", "unverified", "refuted",
                      "widest_claim", "agents", "artifacts", "minutes", "tasks_reached",
                      "late_disasters"])  # fmt: skip
        for r in data["runs"]:
            out.writerow([r["fleet"], r["run"].key, r["run"].started_at.isoformat(), r["run"].state,
                          r["claims"], r["unverified"], r["refuted"], r["claim"], r["agents"],
                          r["artifacts"], r["minutes"], r["tasks"],
                          " ".join(r["late_disasters"])])  # fmt: skip
    elif table == "handoffs":
        out.writerow(["fleet", "producer", "consumer", "claims", "checkable", "refuted",
                      "median_unchecked_minutes"])  # fmt: skip
        for h in data["handoffs"]:
            out.writerow([h["fleet"], h["producer"], h["consumer"], h["claims"], h["checkable"],
                          h["refuted"], h["median_unchecked_minutes"]])  # fmt: skip
    elif table == "escalations":
        out.writerow(["id", "fleet", "run", "task", "status", "outcome", "attempt", "early", "opened_at",
                      "first_look_minutes", "answer_minutes", "packet_to_action_minutes"])  # fmt: skip
        for e in data["health"]["rows"]:
            out.writerow([e["id"], e["fleet"], e["run"], e["task"], e["status"], e["outcome"], e["attempt"],
                          e["early"], e["opened_at"].isoformat(), e["first_look_minutes"],
                          e["answer_minutes"], e["packet_to_action_minutes"]])  # fmt: skip
    else:
        out.writerow(["task", "failed_attempt", "failure", "repeat", "prompt_hash", "context_hash"])
        for row in data["retries"]:
            out.writerow([row["task"], row["failed_attempt"], row["failure"], row["repeat"],
                          row["prompt_hash"], row["context_hash"]])  # fmt: skip
    return response
