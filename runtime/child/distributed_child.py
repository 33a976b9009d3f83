"""One rank of ``cpu2gpu verify --nproc N``: the child (``python -m cpu2gpu.runtime --distributed``)
started by torchrun once per rank.

Each rank writes its own result (``RESULT.rank<R>``), and records, besides what every run
records, a checksum of the parameters the optimizer holds after each counted optimizer step
(their float64 sum and sum of squares), the process group the script opened, and how many
DistributedDataParallel wrappers and DistributedSamplers it built. The parent compares the
checksums across ranks step by step: DDP keeps the ranks' parameters equal, a model that is not
wrapped drifts apart as soon as the ranks see different data.
"""

from __future__ import annotations

import functools
import json
import linecache
import os
import signal
import socket
import sys
import threading
import time
from typing import Any

from ..records import ProcessGroup, RankInfo


def rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def prepare(opts) -> None:
    """Per-rank files: the result, the progress, and the pid (the parent stops the ranks itself on
    its timeout: torchrun starts each in its own session)."""
    r = rank()
    opts.result = f"{opts.result}.rank{r}"
    if opts.progress:
        opts.progress = f"{opts.progress}.rank{r}"
    try:
        with open(opts.result + ".pid", "w") as f:
            f.write(str(os.getpid()))
    except OSError:
        pass


GRACE_S = 3.0  # how long the watchdog leaves the main thread to handle a SIGTERM itself


def _user_frame(frame, rec):
    while frame is not None:
        if rec.is_user_file(frame.f_code.co_filename):
            return frame
        frame = frame.f_back
    return None


def stop_on_sigterm(rec, state) -> None:
    """The first SIGTERM (the parent's timeout, or torchrun after another rank failed) raises in the
    script, so that the rank reports where it was. One that comes once the script has ended (the
    rank is writing its result, or explaining an error) is ignored."""
    from .harness import TimedOut  # harness imports torch: not before keeper.split (see install)

    def handler(signum, frame):
        state.sigterm_handled = True
        if _user_frame(frame, rec) is None:
            return
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise TimedOut("stopped by the timeout")

    signal.signal(signal.SIGTERM, handler)


def _drop_wakeup_fd() -> None:
    try:
        signal.set_wakeup_fd(-1)  # a forked loader worker must not wake its parent's watchdog
    except (ValueError, OSError):
        pass


def watch_sigterm(rec, state, opts, display) -> None:
    """A rank blocked in native code (a gloo collective waiting for a rank that will never come)
    never runs the Python handler: a thread that the signal wakes (set_wakeup_fd) waits GRACE_S,
    then writes the rank's result itself, located at the user's line the main thread is blocked on,
    and ends the process."""
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    try:
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    except (ValueError, OSError):
        return
    os.register_at_fork(after_in_child=_drop_wakeup_fd)
    state.wakeup = (reader, writer)  # kept open for the life of the process
    main_id = threading.main_thread().ident

    def watch():
        while True:
            data = reader.recv(64)
            if not data:
                return
            if signal.SIGTERM in data:
                break
        time.sleep(GRACE_S)
        if state.sigterm_handled or os.path.exists(opts.result):
            return  # the main thread runs Python: it reports and exits itself
        frame = _user_frame(sys._current_frames().get(main_id), rec)
        where = {"file": display(frame.f_code.co_filename), "line": frame.f_lineno} if frame else None
        source = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip() if frame else None
        result = {
            "mode": opts.mode, "status": "error", "exit_code": None, "losses": list(rec.losses),
            "steps": rec.steps, "backward_calls": rec.backward_calls, "step_times": rec.step_times(),
            "device_forward_calls": sum(r.device_calls for r in list(rec.modules.values())),
            "cpu_forward_calls": sum(r.cpu_calls for r in list(rec.modules.values())),
            "trained_devices": sorted(rec.trained_devices), "modules": [], "events": [],
            "exception": {"type": "TimedOut", "message": "stopped while blocked in torch's native code "
                          "(a collective waiting for another rank?)", "file": where and where["file"],
                          "line": where and where["line"], "source": source, "traceback": ""},
            "diagnosis": None, "device_rng": False, "seed": opts.seed, "cap": None,
            "blocked_in_native_code": True, "rank": state.as_dict(),
        }
        try:
            tmp = opts.result + ".watchdog"
            with open(tmp, "w") as f:
                json.dump(result, f)
            if not os.path.exists(opts.result):
                os.replace(tmp, opts.result)
        finally:
            os._exit(1)

    threading.Thread(target=watch, name="cpu2gpu-sigterm-watchdog", daemon=True).start()


class RankRecord:
    def __init__(self, rec) -> None:
        self.rec = rec
        self.checksums: list = []  # [sum, sum of squares, count] after each counted step
        self.process_group: ProcessGroup | None = None
        self.ddp_modules = 0
        self.samplers = 0
        self.shuffling_samplers = 0
        self.set_epoch_calls = 0
        self.sigterm_handled = False
        self.wakeup = None

    def on_step(self, optimizer, args, kwargs) -> None:
        # Registered after the harness's hook: rec.steps already counts this step (or not: skipped).
        if self.rec.steps <= len(self.checksums):
            return
        import torch  # not before keeper.split (see install)

        sums, squares, count = [], [], 0
        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    d = p.detach().to(torch.float64)
                    sums.append(d.sum())
                    squares.append((d * d).sum())
                    count += d.numel()
        if sums:
            s, q = float(torch.stack([x.cpu() for x in sums]).sum()), float(torch.stack([x.cpu() for x in squares]).sum())
        else:
            s = q = 0.0
        self.checksums.append([s, q, count])

    def as_dict(self) -> RankInfo:
        return {
            "rank": rank(), "local_rank": _env_int("LOCAL_RANK"), "world_size": _env_int("WORLD_SIZE"),
            "process_group": self.process_group, "ddp_modules": self.ddp_modules,
            "distributed_samplers": self.samplers, "shuffling_samplers": self.shuffling_samplers,
            "set_epoch_calls": self.set_epoch_calls, "param_checksums": self.checksums,
        }


def _env_int(name):
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def install(rec, opts, display) -> RankRecord:
    """Hook the optimizer steps (checksums), init_process_group, DDP and DistributedSampler; stop on
    SIGTERM as a rank must (after harness.stop_on_sigterm, which this replaces)."""
    # torch: child.py imports this module before keeper.split, which must fork before torch starts threads
    from torch.optim.optimizer import register_optimizer_step_post_hook

    state = RankRecord(rec)
    stop_on_sigterm(rec, state)
    watch_sigterm(rec, state, opts, display)
    register_optimizer_step_post_hook(state.on_step)

    import torch.distributed as dist  # torch: not before keeper.split (see install)

    if dist.is_available():
        orig_init = dist.init_process_group

        @functools.wraps(orig_init)
        def init_process_group(*args, **kwargs):
            out = orig_init(*args, **kwargs)
            try:
                state.process_group = {"backend": str(dist.get_backend()), "world_size": dist.get_world_size(),
                                       "rank": dist.get_rank()}
            except Exception:
                state.process_group = {"backend": None, "world_size": None, "rank": None}
            return out

        dist.init_process_group = init_process_group
        try:
            import torch.distributed.distributed_c10d as c10d  # torch: not before keeper.split (see install)

            c10d.init_process_group = init_process_group
        except ImportError:
            pass

        from torch.nn.parallel import DistributedDataParallel  # torch: not before keeper.split (see install)

        ddp_class: Any = DistributedDataParallel  # patched: its __init__ counts the wrapped modules
        orig_ddp_init = ddp_class.__init__

        def ddp_init(self, *args, **kwargs):
            orig_ddp_init(self, *args, **kwargs)
            state.ddp_modules += 1

        ddp_class.__init__ = ddp_init

    from torch.utils.data.distributed import DistributedSampler  # torch: not before keeper.split (see install)

    sampler_class: Any = DistributedSampler  # patched: counts the samplers and the set_epoch calls
    orig_sampler_init = sampler_class.__init__
    orig_set_epoch = sampler_class.set_epoch

    def sampler_init(self, *args, **kwargs):
        orig_sampler_init(self, *args, **kwargs)
        state.samplers += 1
        if getattr(self, "shuffle", False):
            state.shuffling_samplers += 1

    def set_epoch(self, epoch):
        state.set_epoch_calls += 1
        return orig_set_epoch(self, epoch)

    sampler_class.__init__ = sampler_init
    sampler_class.set_epoch = set_epoch
    return state
