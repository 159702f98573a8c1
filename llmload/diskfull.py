"""A run file that cannot be written (a full disk, a quota): one line, and the run goes on.

A full disk under `--out` used to give a traceback per request and per telemetry sample, a step
controller that died on `plan.json`, and finalisation errors. Now every writer of the run directory
(record files, telemetry lines, `plan.json`) catches the failure, keeps what it can in memory, and says
so once per process (`warn_unwritable`); finalisation turns a full disk into one `llmload: error:`
line and exit code `DISK_FULL_EXIT` (README "exit codes"), keeping every record already on disk in
`records/*.jsonl` for `llmload report RUN_DIR` once there is space.
"""

from __future__ import annotations

import contextlib
import errno
import sys
from pathlib import Path

__all__ = ["DISK_FULL_EXIT", "append_all", "is_disk_full", "warn_unwritable"]

#: exit code of a run whose directory could not be finalised for want of space (no conclusion drawn)
DISK_FULL_EXIT = 4

_DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_said: list[str] = []


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it: pyarrow wraps the OSError) says the disk or quota is full."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno in _DISK_FULL:
            return True
        if "No space left on device" in str(cause) or "Disk quota exceeded" in str(cause):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def warn_unwritable(path: str | Path, exc: OSError, consequence: str) -> None:
    """One line, the first time in this process that a run file cannot be written (later ones are silent:
    a full disk fails every writer at once)."""
    if _said:
        return
    reason = exc.strerror or type(exc).__name__
    _said.append(f"{path}: {reason}")
    with contextlib.suppress(OSError, ValueError):  # stderr itself may be gone
        print(f"llmload: warning: cannot write {path}: {reason}: {consequence}", file=sys.stderr, flush=True)


def append_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd` (a raw file opened for appending): raises OSError when it cannot."""
    import os

    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        view = view[written:]
