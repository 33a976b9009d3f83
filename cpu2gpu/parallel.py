"""Run one function over many items in worker processes, results in the items' order."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Iterator, Optional, Sequence, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

# Below this many items per worker, starting the processes costs more than they save.
MIN_ITEMS_PER_JOB = 8


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def ordered_map(func: Callable[[Item], Result], items: Sequence[Item], jobs: int,
                initializer: Optional[Callable[..., None]] = None, initargs: tuple = ()) -> Iterator[Result]:
    """``map(func, items)``, spread over ``jobs`` processes when there are enough items.

    Items go to the workers in chunks (a few per worker, so that one slow file does not
    hold up the rest) and come back in their original order, so that the output of a
    parallel run is the output of ``jobs=1``. ``func`` and the items must pickle.
    """
    jobs = min(jobs, len(items) // MIN_ITEMS_PER_JOB)
    if jobs <= 1:
        if initializer is not None:
            initializer(*initargs)
        yield from map(func, items)
        return
    chunk = max(1, min(32, len(items) // (jobs * 4)))
    with ProcessPoolExecutor(max_workers=jobs, initializer=initializer, initargs=initargs) as pool:
        yield from pool.map(func, items, chunksize=chunk)
