"""The documented deployment starts again whatever exits, and a worker is configured to ride out
a broker outage rather than exit."""

import configparser
import re
from pathlib import Path

from fleet.celery import app

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "docs" / "deploy"


def unit(name: str) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((UNITS / name).read_text())
    return parser


def test_every_documented_unit_is_started_again_when_it_exits():
    names = sorted(p.name for p in UNITS.glob("*.service"))
    assert names == ["bulkhead-beat.service", "bulkhead-web.service", "bulkhead-worker@.service"]
    for name in names:
        service = unit(name)["Service"]
        assert service["Restart"] == "always", name
        assert float(service["RestartSec"]) <= 5, name


def test_the_worker_unit_never_stops_restarting_and_runs_the_readmes_command():
    worker = unit("bulkhead-worker@.service")
    assert worker["Unit"]["StartLimitIntervalSec"] == "0"
    command = worker["Service"]["ExecStart"]
    assert " -A fleet worker " in command
    readme = (ROOT / "README.md").read_text()
    assert "docs/deploy/bulkhead-worker@.service" in readme
    documented = re.search(r"`(celery -A fleet worker[^`]*)`", readme)
    assert documented, "the README gives the worker's command"
    assert documented.group(1) in command


def test_a_worker_retries_the_broker_for_as_long_as_it_is_down():
    assert app.conf.broker_connection_retry is True
    assert app.conf.broker_connection_max_retries is None


def test_a_worker_cancels_late_acknowledged_tasks_when_the_broker_connection_is_lost():
    # Their acknowledgement on the closed channel is what made kombu's Redis transport raise
    # AttributeError and the worker exit; the reconciler re-enqueues what they stood for.
    assert app.conf.worker_cancel_long_running_tasks_on_connection_loss is True


def test_make_run_supervises_its_worker():
    script = (ROOT / "bin" / "run-embedded").read_text()
    assert "supervise_worker" in script
    loop = script[script.index("supervise_worker() {") :]
    assert "while true" in loop and "celery -A fleet worker" in loop
