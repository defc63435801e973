"""The fault suite's stack (one for the module: starting it is a quarter of the suite's time;
stopped when the module ends, so the rest of the test run does not share the machine with it)
and the figures it measures, written to var/faults.json and printed at the end."""

import json
import platform
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import needs
from tests.faults.stack import ROOT, Stack, available

FIGURES: dict[str, Any] = {}


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    missing = available()
    needs(missing or "nothing", not missing)
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="bulkhead-faults-"))
    built = Stack(workdir)
    FIGURES["stack_start_s"] = round(time.monotonic() - started, 1)
    try:
        yield built
    finally:
        built.destroy()
        write_figures(workdir)


def write_figures(workdir: Path) -> None:
    if not FIGURES:
        return
    FIGURES["machine"] = {
        "cpus": _cpus(),
        "load_average_1m": _load(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    FIGURES["settings"] = dict(Stack.ENV)
    out = ROOT / "var" / "faults.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(FIGURES, indent=2, sort_keys=True) + "\n")
    print(f"\nfault suite figures ({out}; logs under {workdir}):")
    print(json.dumps(FIGURES, indent=2, sort_keys=True))


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


def _load() -> float:
    import os

    return round(os.getloadavg()[0], 2)
