"""The run directory's place and hold: where a run's directory is made, how the launcher claims it, what it holds.

    <output>/<UTC time>-<shape>/      `new_run_dir` (an exclusive mkdir: two runs in one second get `-2`, `-3`)
        .llmload-lock                 `claim_run_dir`: the launcher's flock for the whole run (LOCK_FILE)
        plan.json                     the steps as they go (`llmload.rundir.plan_file`); its presence = a run was here
        records-*.jsonl, telemetry*, manifest.json, summary.json, report.html, records.parquet
                                      what the run writes; `llmload.rundir.finalise` merges and analyses them,
                                      `llmload.rundir.recover` finishes a directory whose master died

The files and their fields: docs/METRICS.md (the contract) and docs/ARCHITECTURE.md "The run directory".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmload.config import Config

__all__ = ["LOCK_FILE", "RunDirClaim", "claim_run_dir", "new_run_dir", "prepare_run_dir", "remove_if_unused"]

#: the file a launcher holds an exclusive lock on while its run uses the directory (`claim_run_dir`)
LOCK_FILE = ".llmload-lock"


def prepare_run_dir(run_dir: Path, *, where: tuple[str, str | None]) -> bool:
    """Create `run_dir` and check that it takes files, before anything starts; a ConfigError naming
    the flag or key (`where`: name, config file) when it cannot. Returns whether it was made here."""
    from llmload.errors import ConfigError

    made = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / f".llmload-write-check-{os.getpid()}"  # own name: two launches check at once
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"cannot write the run directory {run_dir}: {reason}", file=where[1],
                          key=where[0]) from None
    return made


def new_run_dir(config: Config, *, base: str | Path | None = None) -> Path:
    """`<output>/<UTC timestamp>-<shape kind>/`, made here with an exclusive `mkdir`, so two runs started
    in the same second (two processes, two machines on one share) never get the same one (`-2`, `-3`, ...).
    A parent that cannot be made is left to the caller's write check (the path is returned unmade)."""
    from datetime import datetime, timezone

    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    root = Path(base if base is not None else config.output)
    path, n = root / f"{stamp}-{config.shape.kind}", 2
    while True:
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            if not path.is_dir():  # e.g. `output:` names a file: the write check says so
                return path
            path, n = root / f"{stamp}-{config.shape.kind}-{n}", n + 1
        except OSError:
            return path


class RunDirClaim:
    """The launcher's hold on its run directory: an exclusive `flock` on `LOCK_FILE`, released by
    `release()` or when the process ends (a killed launcher never leaves a stale claim)."""

    def __init__(self, run_dir: Path, fd: int) -> None:
        self.run_dir, self._fd = run_dir, fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def claim_run_dir(run_dir: Path, *, where: tuple[str, str | None]) -> RunDirClaim:
    """Claim `run_dir` for this run: a ConfigError (one line, exit 2) naming the flag or key (`where`)
    when another run is writing it now or one already ran there (`plan.json`)."""
    import fcntl

    from llmload.errors import ConfigError

    taken = "another llmload run is writing this run directory now: choose another --out"
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(f"cannot write the run directory {run_dir}: {exc.strerror or exc}", file=where[1],
                          key=where[0]) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise ConfigError(f"{run_dir}: {taken}", file=where[1], key=where[0]) from None
    if (run_dir / "plan.json").exists():
        os.close(fd)
        raise ConfigError(f"{run_dir} already holds a run: choose another --out", file=where[1],
                          key=where[0]) from None
    return RunDirClaim(run_dir, fd)


def remove_if_unused(run_dir: Path | None) -> None:
    """Remove a run directory made for a run that never used it (its lock file aside)."""
    if run_dir is None or not run_dir.is_dir():
        return
    if any(p.name != LOCK_FILE for p in run_dir.iterdir()):
        return
    (run_dir / LOCK_FILE).unlink(missing_ok=True)
    run_dir.rmdir()
