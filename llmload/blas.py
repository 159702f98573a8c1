"""One BLAS thread for our processes unless the environment asks for more: numpy's OpenBLAS starts a
thread per core at import that spins before it sleeps.

numpy's wheels bring OpenBLAS, which starts its thread pool (one thread per core, less one) when numpy is
imported, and each thread busy-waits for work for about 0.1 s before it sleeps: on this project's 2-core
test machine that spin was ~0.07 s of CPU in every process that imported numpy (the `llmload` command,
each Locust process), against ~0.08 s for numpy's whole import. Nothing we run needs a second BLAS
thread: the only matrix algebra is `analysis.fit`'s least squares on n x 3 matrices (one row per
request), a millisecond's work (on one thread its sums also no longer depend on the machine's core
count). `OPENBLAS_NUM_THREADS` set by the user is kept, and so is a numpy already imported (the setting
is read when OpenBLAS loads): `one_blas_thread` then does nothing.
"""

from __future__ import annotations

import os
import sys

__all__ = ["BLAS_THREADS_ENV", "one_blas_thread"]

#: OpenBLAS's thread count, read once when it loads (with numpy)
BLAS_THREADS_ENV = "OPENBLAS_NUM_THREADS"


def one_blas_thread() -> None:
    """Before numpy's import (the `llmload` command's `main`, a Locust child's boot): OpenBLAS with one
    thread, unless `OPENBLAS_NUM_THREADS` says otherwise; nothing once numpy is imported. The processes
    this one starts inherit the setting."""
    if "numpy" not in sys.modules:
        os.environ.setdefault(BLAS_THREADS_ENV, "1")
