"""Child processes that run the analyses, one job at a time each.

Why processes and not a thread: libcst's parser holds the GIL for seconds on a big file (2.5 s of a
600 KB file's 7.5 s analysis, in one stretch), so a thread stalls the protocol's loop and every other
document with it; and a thread cannot be stopped, so a superseded analysis, or one under way when
stdin closes, runs to its end. A process is stopped by killing it.

Where the platform has ``forkserver``, its server imports the analysis once and each worker is a
fork of it, ready at once; elsewhere (Windows) workers are spawned and kept for the next job.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import sys
import threading
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

if TYPE_CHECKING:  # (ForkServerContext is not there on Windows)
    from multiprocessing.context import ForkServerContext, SpawnContext


class WorkerDied(Exception):
    """The worker ended without an answer (it was killed, or it crashed)."""


class JobFailed(Exception):
    """The job raised in the worker; the message is its traceback."""


@dataclass(eq=False)
class _Worker:
    process: BaseProcess
    conn: Connection

    def kill(self) -> None:
        # the thread reading ``conn`` (if any) sees the end of the pipe and closes it
        if self.process.is_alive():
            self.process.kill()


@dataclass(eq=False)
class _Job:
    worker: Optional[_Worker]  # None until its thread has started one
    cancelled: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class Workers:
    """Run ``function(*args)`` in a worker process and await its result; a job that is cancelled
    (its awaiting task is) kills its worker. ``keep`` idle workers wait for the next jobs."""

    def __init__(self, preload: Sequence[str] = (), keep: int = 2) -> None:
        self._context: Union[ForkServerContext, SpawnContext]
        if "forkserver" in multiprocessing.get_all_start_methods():
            forkserver = multiprocessing.get_context("forkserver")
            forkserver.set_forkserver_preload(list(preload))
            self._context = forkserver
        else:
            self._context = multiprocessing.get_context("spawn")
        self.keep = keep
        self._idle: list[_Worker] = []
        self._jobs: set[_Job] = set()
        self._last: dict[str, _Worker] = {}  # affinity -> the worker that ran its last job (it may keep state)
        self._closed = False

    def prepare(self) -> None:
        """Start the fork server (if there is one) before the protocol starts, with stderr where stdout
        was: it and the workers forked from it would otherwise hold the server's stdout open, and the
        client would not see the stream end when the server does."""
        if self._context.get_start_method() != "forkserver":
            return
        from multiprocessing import forkserver

        saved = os.dup(1)
        try:
            os.dup2(2, 1)
            forkserver.ensure_running()
        finally:
            os.dup2(saved, 1)
            os.close(saved)

    def warm(self) -> None:
        """Start a worker now, off the loop, so that the first job does not wait for it."""
        loop = asyncio.get_running_loop()

        def start() -> None:
            worker = self._start()
            try:
                loop.call_soon_threadsafe(self._release, worker, None)
            except RuntimeError:  # the loop has closed: the server is gone
                worker.kill()

        threading.Thread(target=start, name="cpu2gpu-warm", daemon=True).start()

    async def run(self, function: Callable[..., Any], *args: Any, affinity: Optional[str] = None) -> Any:
        if self._closed:
            raise WorkerDied("the server is stopping")
        loop = asyncio.get_running_loop()
        job = _Job(self._idle_worker(affinity))
        self._jobs.add(job)
        answer: asyncio.Future = loop.create_future()
        threading.Thread(target=self._exchange, args=(job, (function, args), loop, answer),
                         name="cpu2gpu-job", daemon=True).start()
        try:
            status, value = await answer
        except BaseException:  # cancelled: a newer version of the document, the client, the end of the server
            self._cancel(job)
            raise
        finally:
            self._jobs.discard(job)
        if status == "died":
            if job.worker is not None:
                self._forget(job.worker)
            raise WorkerDied(value)
        assert job.worker is not None
        self._release(job.worker, affinity)
        if status == "error":
            raise JobFailed(value)
        return value

    def close(self) -> None:
        """Kill every worker, busy or idle: nothing of the server outlives it."""
        self._closed = True
        for job in list(self._jobs):
            self._cancel(job)
        for worker in self._idle:
            worker.kill()
            worker.conn.close()
        self._idle.clear()

    # -- on the loop --

    def _idle_worker(self, affinity: Optional[str]) -> Optional[_Worker]:
        self._idle = [worker for worker in self._idle if worker.process.is_alive()]
        preferred = self._last.get(affinity) if affinity is not None else None
        if preferred is not None and preferred in self._idle:
            self._idle.remove(preferred)
            return preferred
        return self._idle.pop() if self._idle else None

    def _release(self, worker: _Worker, affinity: Optional[str]) -> None:
        if affinity is not None:
            self._last[affinity] = worker
        if not self._closed and worker.process.is_alive() and len(self._idle) < self.keep:
            self._idle.append(worker)
            return
        self._forget(worker)
        worker.kill()
        worker.conn.close()

    def _cancel(self, job: _Job) -> None:
        with job.lock:
            job.cancelled = True
            worker = job.worker
        if worker is not None:
            self._forget(worker)
            worker.kill()

    def _forget(self, worker: _Worker) -> None:
        self._last = {key: known for key, known in self._last.items() if known is not worker}

    # -- on the job's thread --

    def _start(self) -> _Worker:
        parent, child = self._context.Pipe()
        process = self._context.Process(target=_serve, args=(child,), name="cpu2gpu-analysis", daemon=True)
        process.start()
        child.close()
        return _Worker(process, parent)

    def _exchange(self, job: _Job, request: tuple, loop: asyncio.AbstractEventLoop, answer: asyncio.Future) -> None:
        result: tuple[str, Any]
        try:
            if job.worker is None:
                worker = self._start()
                with job.lock:
                    job.worker = worker
                    cancelled = job.cancelled
                if cancelled:
                    worker.kill()
                    worker.conn.close()
                    return
            assert job.worker is not None
            job.worker.conn.send(request)
            result = job.worker.conn.recv()
        except (EOFError, OSError) as error:  # killed (cancelled), or it crashed
            result = ("died", f"the analysis process ended: {error or type(error).__name__}")
            if job.worker is not None:
                job.worker.conn.close()
        except Exception:  # (the request could not be pickled)
            result = ("error", traceback.format_exc())
        try:
            loop.call_soon_threadsafe(_settle, answer, result)
        except RuntimeError:  # the loop has closed: the server is gone
            pass


def _settle(answer: asyncio.Future, result: tuple) -> None:
    if not answer.done():
        answer.set_result(result)


def _serve(conn: Connection) -> None:
    """A worker's life: run each job it is sent, answer (status, value), until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the editor's terminal is the server's to handle
    sys.stdout = sys.stderr  # the server's stdout is the protocol's channel: anything printed goes to the log
    while True:
        try:
            function, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            answer: tuple[str, Any] = ("ok", function(*args))
        except BaseException:
            answer = ("error", traceback.format_exc())
        try:
            conn.send(answer)
        except (EOFError, OSError):
            return
        except Exception:  # the result could not be pickled
            conn.send(("error", traceback.format_exc()))


__all__ = ["JobFailed", "WorkerDied", "Workers"]
