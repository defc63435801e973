"""The test_run verifier: re-run an allowed command in its workspace and hash its output."""

import hashlib
import os
import selectors
import shlex
import signal
import subprocess
import time
from contextlib import suppress
from pathlib import Path

from runs.claims.hashing import test_run_payload
from runs.claims.verifiers.base import (
    Limits,
    Sources,
    Verdict,
    _Evidence,
    _judge,
    _registered,
    _seconds,
    _Unverifiable,
)


def _reach_test_run(claimed: _Evidence, sources: Sources) -> tuple[str, str, str]:
    """The allowed command and the workspace to run it in, or why there is none."""
    command = claimed.source
    if command not in sources.commands:
        raise _Unverifiable(
            "the command is not one of the fleet's allowed test commands (it must match one "
            "exactly), so it was not run"
        )
    name, directory = _registered("workspace", sources.workspaces, claimed.workspace)
    return command, name, directory


def _verify_test_run(claimed: _Evidence, sources: Sources, limits: Limits) -> Verdict:
    command, name, directory = _reach_test_run(claimed, sources)
    if not Path(directory).is_dir():
        raise _Unverifiable(f"workspace {name!r} ({directory}) does not exist")
    try:
        argv = shlex.split(command)
    except ValueError as error:
        raise _Unverifiable(f"the command line cannot be split into words: {error}") from None
    if not argv:
        raise _Unverifiable("the command line is empty")
    exit_code, output_sha256 = _run_command(argv, directory, limits)
    observed = test_run_payload(command=command, exit_code=exit_code, output_sha256=output_sha256)
    summary = f"it exits with {exit_code}"
    claimed_exit = claimed.payload.get("exit_code") if claimed.payload else None
    if claimed_exit == exit_code:
        summary += (
            ", as claimed, but its output differs: the output hash covers every byte, so "
            "timings or random order in the output change it"
        )
    return _judge(claimed, observed, f"re-ran {command!r} in workspace {name!r}", summary)


def _command_environment() -> dict[str, str]:
    # The command runs code the agents wrote: it gets no secrets from the verifier's environment.
    kept = {key: os.environ[key] for key in ("PATH", "HOME") if key in os.environ}
    return kept | {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC"}


def _run_command(argv: list[str], directory: str, limits: Limits) -> tuple[int, str]:
    try:
        process = subprocess.Popen(
            argv,
            cwd=directory,
            env=_command_environment(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # one stream, in the order written: `2>&1`
            start_new_session=True,  # its own process group, so it can be stopped whole
        )
    except (OSError, ValueError) as error:
        raise _Unverifiable(f"could not start the command: {error}") from None
    try:
        output_sha256 = _hash_output(process, limits)
    finally:
        _stop_process_group(process)
        code = process.wait()
    return (128 - code if code < 0 else code), output_sha256


def _hash_output(process: subprocess.Popen[bytes], limits: Limits) -> str:
    """Hash what the command writes until it exits (not what background children write later)."""
    assert process.stdout is not None
    descriptor = process.stdout.fileno()
    deadline = time.monotonic() + limits.command_timeout
    digest = hashlib.sha256()
    size = 0
    closed = False
    with selectors.DefaultSelector() as selector:
        selector.register(descriptor, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Unverifiable(
                    f"the command did not finish within {_seconds(limits.command_timeout)} and "
                    "was stopped"
                )
            exited = _has_exited(process)
            if closed:
                if exited:
                    return digest.hexdigest()
                time.sleep(min(0.05, remaining))
                continue
            if not selector.select(0 if exited else min(0.1, remaining)):
                if exited:
                    return digest.hexdigest()
                continue
            chunk = os.read(descriptor, 65536)
            if not chunk:
                closed = True
                continue
            size += len(chunk)
            if size > limits.max_output_bytes:
                raise _Unverifiable(
                    f"the command wrote more than {limits.max_output_bytes} bytes and was stopped"
                )
            digest.update(chunk)


def _has_exited(process: subprocess.Popen[bytes]) -> bool:
    # WNOWAIT leaves the process a zombie, so its process group id cannot be reused before
    # the group is stopped.
    try:
        waited = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped already (SIGCHLD ignored)
        return True
    return waited is not None


def _stop_process_group(process: subprocess.Popen[bytes]) -> None:
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    if process.stdout is not None:
        process.stdout.close()
