"""Forked worker processes for verify (and the auditor's replay built on it).

Why ``concurrent.futures.ProcessPoolExecutor`` and not ``multiprocessing.Pool``: a Pool whose
work is abandoned half-way (verify stops at the first bad event while chunks are in flight) is
torn down by ``terminate()``, and a Pool waits forever for the result of a task whose worker
died. A test run under heavy load hung once in verify's Pool, both workers already exited (the
exact cause was not pinned down). The executor cancels what has not started, waits for what has
(a chunk is at most ~0.1 s of work), and reports a dead worker as ``BrokenProcessPool`` instead of
waiting for it.

Workers are forked, so they inherit the caller's memory (the commit graph verify built) instead of
receiving it through pipes: the caller sets what they need in a module global, calls
:func:`start_forked_workers`, and may clear the global as soon as it returns.
"""

from __future__ import annotations

import gc
import multiprocessing
from concurrent.futures import ProcessPoolExecutor


def start_forked_workers(workers: int) -> ProcessPoolExecutor:
    """Fork ``workers`` processes now and return the executor that feeds them.

    The cyclic collector is disabled in the workers, and objects that exist at the fork are
    frozen out of its reach while they start, so that a collection does not write to (and copy)
    every page a worker shares with this process.
    Raises: OSError when the processes cannot be forked.
    """
    gc.freeze()
    try:
        executor = ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("fork"), initializer=gc.disable
        )
        # with the fork start method every worker is started at the first submission
        executor.submit(int).result()
    finally:
        gc.unfreeze()
    return executor


def stop_workers(executor: ProcessPoolExecutor) -> None:
    """Cancel the tasks that have not started, wait for the running ones, reap the workers."""
    executor.shutdown(wait=True, cancel_futures=True)
