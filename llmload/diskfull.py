"""A run file that cannot be written (a full disk, a quota): one line, and the run goes on.

A full disk under `--out` used to give a traceback per request and per telemetry sample, a step
controller that died on `plan.json`, and finalisation errors. Now every writer of the run directory
(record files, telemetry lines, `plan.json`) catches the failure, keeps what it can in memory, and says
so once per process (`warn_unwritable`); finalisation turns a full disk into one `llmload: error:`
line and exit code `DISK_FULL_EXIT` (README "exit codes"), keeping every record already on disk in
`records/*.jsonl` for `llmload report RUN_DIR` once there is space.

Finished records outrank telemetry (issue 44): a telemetry writer stops for the rest of the run once the
filesystem under the run directory has less than `TELEMETRY_RESERVE_BYTES` free (`os.statvfs`), so the
telemetry log can no longer fill the disk the records need. It says so once when it stops
(`telemetry_stopped`), counts what it did not write, and the run's closing line says what was dropped
(`dropped_said`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import threading
import time
from pathlib import Path

__all__ = ["DISK_FULL_EXIT", "TELEMETRY_RESERVE_BYTES", "append_all", "dropped_said", "free_bytes",
           "is_disk_full", "reset_dropped", "telemetry_dropped", "telemetry_stopped", "warn_unwritable"]

#: exit code of a run whose directory could not be finalised for want of space (no conclusion drawn)
DISK_FULL_EXIT = 4

_DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
#: free space under the run directory below which telemetry stops: what the records still to come and the
#: finalised files need (16 MiB holds ~10,000 records of ~1.5 KB plus their records.parquet and summary)
TELEMETRY_RESERVE_BYTES = 16 * 2**20

_said: list[str] = []
_lock = threading.Lock()
#: this process's telemetry writers: when the first one stopped, and how many samples were not written
_telemetry: dict[str, float | int | None] = {"stopped_at": None, "dropped": 0}


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


def free_bytes(path: str | Path) -> int | None:
    """Bytes an unprivileged writer may still use on the filesystem holding `path` (None: unknown)."""
    try:
        st = os.statvfs(path)
    except (OSError, AttributeError):  # no statvfs (Windows), or the folder is gone
        return None
    return st.f_bavail * st.f_frsize


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def telemetry_stopped(path: str | Path, t: float, *, free: int | None, reserve: int) -> None:
    """A telemetry writer stopped at `t` (epoch seconds): one line for the process's first, naming why."""
    with _lock:
        first = _telemetry["stopped_at"] is None
        if first:
            _telemetry["stopped_at"] = t
    if not first:
        return
    why = (f"{_mib(free)} free under {Path(path).parent}, under the {_mib(reserve)} kept for finished records"
           if free is not None else f"cannot write {path}")
    with contextlib.suppress(OSError, ValueError):  # stderr itself may be gone
        print(f"llmload: warning: telemetry stops at {_clock(t)}: {why}; the run and its records go on",
              file=sys.stderr, flush=True)


def reset_dropped() -> None:
    """Forget what an earlier run in this process dropped (the web UI starts run after run)."""
    with _lock:
        _telemetry.update(stopped_at=None, dropped=0)


def telemetry_dropped(samples: int) -> None:
    """Count `samples` a stopped telemetry writer did not write."""
    with _lock:
        _telemetry["dropped"] = int(_telemetry["dropped"] or 0) + samples


def dropped_said(*, records_lost: int = 0) -> str:
    """What this process dropped for want of space, for the run's closing line ('' when nothing):
    `telemetry stopped at 00:41:07 UTC, 1,234 samples not written; 3 finished records lost`."""
    parts = []
    stopped = _telemetry["stopped_at"]
    if stopped is not None:
        parts.append(f"telemetry stopped at {_clock(float(stopped))}, {int(_telemetry['dropped'] or 0):,} "
                     f"sample(s) not written")
    if records_lost > 0:
        parts.append(f"{records_lost:,} finished record(s) lost")
    return "; ".join(parts)


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(t))
