"""The file_read verifier: re-read the claimed lines inside a registered workspace."""

import os
import re
import stat
from pathlib import Path, PurePath
from typing import Final

from runs.claims.hashing import file_read_payload, split_lines
from runs.claims.verifiers.base import (
    Limits,
    Sources,
    Verdict,
    _Evidence,
    _judge,
    _preview,
    _Refuted,
    _registered,
    _Unverifiable,
)

_LINE_RANGE: Final = re.compile(r"(?P<path>.+):(?P<start>[0-9]+)-(?P<end>[0-9]+)", re.DOTALL)


def _reach_file_read(claimed: _Evidence, sources: Sources) -> tuple[str, int, int, str, str]:
    """The path, its line range and the workspace to read it in, or why there is none."""
    match = _LINE_RANGE.fullmatch(claimed.source)
    if match is None:
        raise _Unverifiable("a file_read source must be path:start-end, such as config.yaml:3-7")
    path, start, end = match["path"], int(match["start"]), int(match["end"])
    if not 1 <= start <= end:
        raise _Unverifiable(f"the line range {start}-{end} must have 1 <= start <= end")
    name, directory = _registered("workspace", sources.workspaces, claimed.workspace)
    return path, start, end, name, directory


def _verify_file_read(claimed: _Evidence, sources: Sources, limits: Limits) -> Verdict:
    path, start, end, name, directory = _reach_file_read(claimed, sources)
    content = _read_inside(name, directory, path, limits)
    lines = split_lines(content)
    if end > len(lines):
        raise _Refuted(
            f"re-read {path} in workspace {name!r}: it has {len(lines)} lines, so lines "
            f"{start}-{end} do not exist"
        )
    observed = file_read_payload(path=path, start=start, end=end, lines=lines[start - 1 : end])
    summary = f"lines {start}-{end} read {_preview(observed['text'])}"
    return _judge(claimed, observed, f"re-read {path} in workspace {name!r}", summary)


def _read_inside(name: str, directory: str, path: str, limits: Limits) -> str:
    root = Path(directory).absolute()
    try:
        real_root = root.resolve(strict=True)
    except OSError:
        raise _Unverifiable(f"workspace {name!r} ({directory}) does not exist") from None
    if "\x00" in path:
        raise _Unverifiable("the path holds a NUL byte")
    relative = PurePath(path)
    if ".." in relative.parts:
        raise _Unverifiable(
            f"{path} climbs out with '..'; the verifier reads only inside workspace {name!r}"
        )
    if relative.is_absolute() and not any(map(Path(path).is_relative_to, (root, real_root))):
        raise _Unverifiable(
            f"{path} is outside workspace {name!r}; the verifier reads only inside it"
        )
    real = (root / relative).resolve()  # an absolute path replaces the root
    if not real.is_relative_to(real_root):
        raise _Unverifiable(f"{path} is a link that leaves workspace {name!r}; it was not read")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        descriptor = os.open(real, flags | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise _Refuted(f"re-read workspace {name!r}: there is no file {path}") from None
    except OSError as error:
        reason = f"could not open {path} in workspace {name!r}: {error.strerror}"
        raise _Unverifiable(reason) from None
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode):  # a directory too: open() of it would raise
        os.close(descriptor)
        raise _Unverifiable(f"{path} in workspace {name!r} is not a regular file")
    with open(descriptor, "rb") as file:
        if status.st_size > limits.max_file_bytes:
            raise _Unverifiable(
                f"{path} is {status.st_size} bytes; the verifier reads files of at most "
                f"{limits.max_file_bytes} bytes"
            )
        data = file.read(limits.max_file_bytes + 1)
    if len(data) > limits.max_file_bytes:
        raise _Unverifiable(f"{path} grew past {limits.max_file_bytes} bytes while being read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Unverifiable(f"{path} in workspace {name!r} is not UTF-8 text") from None
