"""The documented deployment starts again whatever exits, and a worker is configured to ride out
a broker outage rather than exit."""

import configparser
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


# Stand-ins for the worker and the web server: each logs the signals it gets; the worker, like
# Celery, starts itself again on a hang-up.
STAND_IN_WORKER = """#!/usr/bin/env bash
trap 'echo "HUP $$" >>var/signals.log; exec "$0" "$@"' HUP
trap 'echo "TERM $$" >>var/signals.log; exit 0' TERM
trap 'echo "INT $$" >>var/signals.log; exit 0' INT
echo "started $$" >>var/signals.log
while true; do sleep 0.05; done
"""
STAND_IN_WEB = """#!/usr/bin/env bash
trap 'exit 0' TERM INT HUP
while true; do sleep 0.05; done
"""


def started_like_a_terminal(tmp_path: Path) -> subprocess.Popen[bytes]:
    """bin/run-embedded in a copy whose worker and web server are the stand-ins, in a session
    of its own (as a terminal's foreground job is), with the terminal's signals not ignored."""
    (tmp_path / "bin").mkdir()
    shutil.copy(ROOT / "bin" / "run-embedded", tmp_path / "bin")
    tools = tmp_path / ".venv" / "bin"
    tools.mkdir(parents=True)
    for name, text in [("celery", STAND_IN_WORKER), ("gunicorn", STAND_IN_WEB)]:
        (tools / name).write_text(text)
        (tools / name).chmod(0o755)

    def default_signals() -> None:
        for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)

    script = subprocess.Popen(
        ["bash", str(tmp_path / "bin" / "run-embedded"), "1"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, preexec_fn=default_signals,
    )  # fmt: skip
    log = tmp_path / "var" / "signals.log"
    deadline = time.monotonic() + 20
    while not (log.exists() and "started" in log.read_text()):
        assert time.monotonic() < deadline, "the worker was not started"
        time.sleep(0.05)
    return script


def left_running(group: int) -> list[str]:
    listed = subprocess.run(["pgrep", "-g", str(group)], capture_output=True, text=True)
    return listed.stdout.split()


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGHUP, signal.SIGTERM], ids=["ctrl-c", "hang-up", "term"]
)
def test_make_run_stops_its_worker_once_when_stopped_or_its_terminal_closes(tmp_path, sig):
    script = started_like_a_terminal(tmp_path)
    worker = int((tmp_path / "var" / "worker.pid").read_text())
    try:
        os.killpg(script.pid, sig)  # what the terminal sends its foreground job
        assert script.wait(timeout=20) == 0
        log = (tmp_path / "var" / "signals.log").read_text().split("\n")
        # The worker got TERM from its supervisor, not the hang-up it would restart on.
        assert [line.split()[0] for line in log if line] == ["started", "TERM"]
        deadline = time.monotonic() + 10
        while left_running(script.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert left_running(script.pid) == []
    finally:  # nothing left behind when it fails
        for pid in [script.pid, worker]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def test_the_web_process_keeps_what_it_loaded_out_of_the_collectors_passes():
    """What gunicorn loads (every view included) lives as long as the process; a full pass of
    the garbage collector that walks it lands in the middle of a request."""
    script = (
        "import gc, sys, fleet.wsgi\n"
        "print(gc.get_freeze_count(), 'escalations.views.queue' in sys.modules)"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "fleet.settings"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
        check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    frozen, views_loaded = done.stdout.split()
    assert int(frozen) > 10_000
    assert views_loaded == "True"
