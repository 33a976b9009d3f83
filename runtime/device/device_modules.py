"""torch.cuda, torch.mps and torch.accelerator, as a machine with one such GPU answers them.

For "cuda", torch.cuda says yes to everything a one-GPU machine says yes to: a device, its
properties, its memory counters (zero), streams and events (synchronous here), and its seeding and
RNG state (the device generator of rng, which draws nothing). What initialises CUDA on a real
machine initialises it here too (state.lazy_init). For "mps", torch.backends.mps and torch.mps
answer as an Apple machine does, and torch.cuda stays as it is (no CUDA there).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch

from . import state
from .rng import device_generator, seed_device


class _DeviceProperties:
    name = "Simulated CUDA device (cpu2gpu sim)"
    major, minor = 8, 0
    total_memory = 16 * 1024**3
    multi_processor_count = 1

    def __repr__(self):
        return f"_CudaDeviceProperties(name='{self.name}', major=8, minor=0, total_memory=16384MB)"


class _DeviceContext:
    def __init__(self, device=None):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Event:
    """torch.cuda.Event: times on the host clock; everything is synchronous here."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self._t = None

    def record(self, stream=None):
        state.lazy_init()  # on the current stream: initialises CUDA

        self._t = time.perf_counter()

    def synchronize(self):
        pass

    def wait(self, stream=None):
        pass

    def query(self):
        return True

    def elapsed_time(self, end):
        return (end._t - self._t) * 1000.0


class _Stream:
    def __init__(self, *args, **kwargs):
        state.lazy_init()  # torch.cuda.Stream() initialises CUDA

    def synchronize(self):
        pass

    def wait_stream(self, other):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        event = event or _Event()
        event.record()
        return event


def _const(value):
    # A fresh function per name: torch._dynamo refuses one object under two names.
    def f(*args, **kwargs):
        return value

    return f


def _initializing(value):
    # A torch.cuda call that initialises CUDA (it calls _lazy_init) and answers `value`.
    def f(*args, **kwargs):
        state.lazy_init()
        return value

    return f


def patch_cuda_module() -> None:
    """torch.cuda as a machine with one NVIDIA GPU answers it."""
    c: Any = torch.cuda  # patched: its stand-ins are not torch's signatures
    # What initialises CUDA on a real machine goes through _lazy_init; is_available(), device_count(),
    # the memory counters, empty_cache() and the seeding (queued until the initialisation) do not.
    for name in ("init", "_lazy_init", "set_device", "synchronize"):
        setattr(c, name, _initializing(None))
    for name in ("empty_cache", "ipc_collect", "reset_peak_memory_stats", "reset_max_memory_allocated"):
        setattr(c, name, _const(None))
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
        setattr(c, name, _const(0))
    c.current_device = _initializing(0)
    c.is_available = _const(True)
    c.is_bf16_supported = _initializing(True)
    c.is_initialized = state.is_initialized
    c._is_in_bad_fork = state.in_bad_fork  # torch.manual_seed asks it before seeding the device
    c.device_count = _const(1)
    c.get_device_name = _initializing(_DeviceProperties.name)
    c.get_device_capability = _initializing((8, 0))
    def get_device_properties(device=None):
        state.lazy_init()
        return _DeviceProperties()

    def get_rng_state(device="cuda"):
        state.lazy_init()
        return device_generator.get_state()

    def get_rng_state_all():
        state.lazy_init()
        return [device_generator.get_state()]

    c.get_device_properties = get_device_properties
    c.manual_seed = lambda seed: seed_device(seed)
    c.manual_seed_all = lambda seed: seed_device(seed)
    c.seed = lambda: device_generator.seed()
    c.seed_all = lambda: device_generator.seed()
    c.initial_seed = lambda: device_generator.initial_seed()
    c.get_rng_state = get_rng_state
    c.get_rng_state_all = get_rng_state_all
    c.set_rng_state = lambda state, device="cuda": device_generator.set_state(state)
    c.set_rng_state_all = lambda states: device_generator.set_state(states[0])
    c.device = _DeviceContext
    c.device_of = _DeviceContext
    c.Event = _Event
    c.Stream = _Stream
    c.current_stream = lambda device=None: _Stream()
    c.default_stream = lambda device=None: _Stream()
    c.stream = lambda stream=None: _DeviceContext()
    torch.backends.cuda.is_built = _const(True)
    # cuDNN is not there: say "not acceptable" quietly, as for an unsupported input.
    torch.backends.cudnn.is_acceptable = _const(False)


def patch_mps_module(count_cuda_query: Callable[[], None]) -> None:
    """An Apple machine: torch.backends.mps answers yes, torch.cuda stays as it is (no CUDA there);
    ``count_cuda_query`` is called each time the script asks torch.cuda.is_available()."""
    cuda_is_available = torch.cuda.is_available

    def is_available():
        count_cuda_query()
        return cuda_is_available()

    torch.cuda.is_available = is_available
    mps = torch.backends.mps
    mps.is_available = _const(True)
    mps.is_built = _const(True)
    m: Any = torch.mps  # patched: its stand-ins are not torch's signatures
    for name in ("synchronize", "empty_cache", "set_per_process_memory_fraction"):
        setattr(m, name, _const(None))
    for name in ("current_allocated_memory", "driver_allocated_memory"):
        setattr(m, name, _const(0))
    m.recommended_max_memory = _const(16 * 2**30)
    m.device_count = _const(1)
    m.manual_seed = lambda seed: seed_device(seed)
    m.seed = lambda: device_generator.seed()
    m.get_rng_state = lambda device="mps": device_generator.get_state()
    m.set_rng_state = lambda state, device="mps": device_generator.set_state(state)


def patch_accelerator() -> None:
    """torch.accelerator: the one GPU the simulator plays."""
    acc = torch.accelerator
    acc.is_available = _const(True)
    acc.current_accelerator = lambda check_available=False: torch.device(state.kind)
    acc.device_count = _const(1)
    acc.current_device_index = _initializing(0)  # these initialise the device, as in torch
    acc.current_device_idx = _initializing(0)
    acc.set_device_index = _initializing(None)
    acc.set_device_idx = _initializing(None)
    acc.synchronize = _initializing(None)
    acc.get_device_capability = _const({})
