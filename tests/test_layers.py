"""The layer rule holds: the fleet's core, then the work, then the desk; the rules are pure."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", "pyproject.toml", "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the three apps and the contracts, to break on purpose."""
    for name in ("fleet", "runs", "escalations"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def add_import(module: Path, line: str) -> None:
    module.write_text(module.read_text() + f"\n{line}\n")


def test_the_code_keeps_every_layer_contract():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


def test_it_fails_when_the_work_imports_the_desk(tree):
    add_import(tree / "runs" / "scheduler.py", "from escalations import models  # noqa")
    result = lint_imports(tree)
    assert result.returncode == 1
    assert "runs.scheduler -> escalations.models" in result.stdout
    assert "The work (runs/) never imports the desk (escalations/)" in result.stdout


def test_it_fails_when_the_work_reaches_the_desk_through_the_fleet(tree):
    add_import(tree / "fleet" / "outbox.py", "from escalations import models  # noqa")
    result = lint_imports(tree)
    assert result.returncode == 1
    assert "fleet.outbox -> escalations.models" in result.stdout
    # runs/ imports the outbox, so the desk is reachable from the work, indirectly.
    assert "runs is not allowed to import escalations" in result.stdout


def test_it_fails_when_a_rule_imports_django(tree):
    add_import(tree / "runs" / "frontier.py", "from django.utils import timezone  # noqa")
    result = lint_imports(tree)
    assert result.returncode == 1
    assert "runs.frontier is not allowed to import django" in result.stdout
