"""Run one function over many items in worker processes, results in the items' order.

One item must not cost the others: a worker that dies (a native parser that crashes on a file)
breaks the pool; the pool is replaced, the items it had not answered are run again, a few at a time,
and the one that kills a worker on its own gets ``crashed(item)`` as its result. Workers die with the
process that started them (a SIGTERM or SIGKILL to ``cpu2gpu check -j N`` leaves no process behind)
and leave SIGINT to it (one quiet exit, not a traceback per worker).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Sequence, TypeVar

if TYPE_CHECKING:  # imported where a pool starts: a run in one process does not load them
    from concurrent.futures import Future, ProcessPoolExecutor

Item = TypeVar("Item")
Result = TypeVar("Result")

# Below this many items per worker, starting the processes costs more than they save.
MIN_ITEMS_PER_JOB = 8


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def workers_for(jobs: int, items: int) -> int:
    """How many worker processes ``ordered_map`` uses for that many items (1: it runs in process)."""
    return max(1, min(jobs, items // MIN_ITEMS_PER_JOB))


def ordered_map(func: Callable[[Item], Result], items: Sequence[Item], jobs: int,
                initializer: Optional[Callable[..., None]] = None, initargs: tuple = (),
                crashed: Optional[Callable[[Item], Result]] = None) -> Iterator[Result]:
    """``map(func, items)``, spread over ``jobs`` processes when there are enough items.

    Items go to the workers in chunks (a few per worker, so that one slow file does not
    hold up the rest) and come back in their original order, so that the output of a
    parallel run is the output of ``jobs=1``. ``func`` and the items must pickle.
    ``crashed(item)``: the result for an item that kills its worker process (without it,
    ``BrokenProcessPool`` is raised).
    """
    jobs = workers_for(jobs, len(items))
    if jobs <= 1:
        if initializer is not None:
            initializer(*initargs)
        yield from map(func, items)
        return
    ready: dict[int, Result] = {}
    next_index = 0
    for index, result in _unordered(func, items, jobs, initializer, initargs, crashed):
        ready[index] = result
        while next_index in ready:
            yield ready.pop(next_index)
            next_index += 1


def _apply(func: Callable[[Item], Result], chunk: list) -> list:
    return [func(item) for item in chunk]


def _unordered(func: Callable[[Item], Result], items: Sequence[Item], jobs: int, initializer: Optional[Callable[..., None]],
               initargs: tuple, crashed: Optional[Callable[[Item], Result]]) -> Iterator[tuple[int, Result]]:
    """(index, result) pairs as the workers answer them.

    First every item in chunks; after a worker died, the items not answered go in groups of ``jobs``
    single items, and a group that breaks the pool again is run one item at a time: the item that
    breaks it alone is the one that crashes."""
    chunk = max(1, min(32, len(items) // (jobs * 4)))
    groups: deque[list[int]] = deque([list(range(len(items)))])
    careful = False  # a worker died: groups of single items from now on
    from concurrent.futures.process import BrokenProcessPool

    while groups:
        pool = _pool(jobs, initializer, initargs)
        finished = False
        try:
            while groups:
                group = groups.popleft()
                size = 1 if careful else chunk
                futures = {pool.submit(_apply, func, [items[i] for i in part]): part
                           for part in (group[start:start + size] for start in range(0, len(group), size))}
                answered: set[int] = set()
                broken = False
                for future in _as_completed(futures):
                    try:
                        results = future.result()
                    except BrokenProcessPool:
                        if crashed is None:
                            raise
                        broken = True
                        continue
                    for index, result in zip(futures[future], results):
                        answered.add(index)
                        yield index, result
                if not broken:
                    continue
                unanswered = [i for i in group if i not in answered]
                assert crashed is not None  # without it, the broken pool has raised above
                if len(unanswered) == 1:  # it broke the pool on its own
                    yield unanswered[0], crashed(items[unanswered[0]])
                elif careful:  # one at a time
                    groups.extendleft([i] for i in reversed(unanswered))
                else:
                    careful = True
                    groups.extendleft(unanswered[start:start + jobs]
                                      for start in reversed(range(0, len(unanswered), jobs)))
                break  # a new pool for the rest
            else:
                finished = True
        finally:
            _close(pool, finished)


def _as_completed(futures: dict) -> Iterator[Future]:
    from concurrent.futures import FIRST_COMPLETED, wait

    pending = set(futures)
    while pending:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        # in submission order among those done together: the output does not depend on timing
        yield from sorted(done, key=lambda f: futures[f][0])


def _pool(jobs: int, initializer, initargs: tuple) -> ProcessPoolExecutor:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=jobs, initializer=_start_worker,
                               initargs=(os.getpid(), multiprocessing.get_start_method(), initializer, initargs))


def _close(pool: ProcessPoolExecutor, finished: bool) -> None:
    """Shut the pool down; when the run was cut short (an exception, SIGINT, the consumer stopped),
    without waiting for the items in flight: their workers are killed."""
    if finished:
        pool.shutdown(wait=True)
        return
    manager = getattr(pool, "_executor_manager_thread", None)
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        try:
            process.kill()
        except (OSError, AttributeError, ValueError):
            pass
    if manager is not None:
        # its clean-up must be over before the interpreter exits (else concurrent.futures' exit hook
        # can write to the pipe it is closing: "Bad file descriptor" on stderr)
        manager.join()


# -- in the worker --


def _start_worker(parent: int, start_method: str, initializer, initargs: tuple) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the run; no traceback per worker
    _die_with_parent(parent, start_method)
    if initializer is not None:
        initializer(*initargs)


_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int, start_method: str) -> None:
    """The worker is killed when the process that started it ends, however it ends."""
    watched = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                # the parent may have gone before the request was made
                if start_method in ("fork", "spawn") and os.getppid() != parent:
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass
    threading.Thread(target=_watch_parent, args=(watched,), name="cpu2gpu-parent-watch", daemon=True).start()


def _watch_parent(watched: int) -> None:
    while os.getppid() == watched:
        time.sleep(0.5)
    os._exit(1)
