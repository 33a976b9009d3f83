"""The typed records every room reads: a run's result, verify's report, migrate's report.

They travel as plain dicts (the child writes its result as JSON, the reports are printed or dumped
as JSON), so the records are ``TypedDict``s: they name the keys for mypy and change nothing at run
time. A record that its readers take as ``x.get(key) or {}`` has every key optional (``total=False``):
mypy cannot type the ``{}`` otherwise. The bottom layer: imports nothing of the runtime, nor torch.
"""

from __future__ import annotations

from typing import Any, TypedDict

# -- pieces of a run's result ------------------------------------------------------------------------


class Where(TypedDict, total=False):
    """A place in the user's code, as the user sees it."""

    file: str | None  # shown relative to the folder verify ran from (None: not known)
    line: int | None


class ExceptionRecord(TypedDict, total=False):
    """What stopped a run: the script's exception, or one the parent made (timeout, crash, a write refused)."""

    type: str  # the exception's class name, or the parent's: "Timeout", "crashed", "WroteOutsideCopy"...
    message: str
    file: str | None  # the user's innermost frame
    line: int | None
    source: str | None  # that line's text
    traceback: str  # the last frames, at most 4000 characters


class Diagnosis(TypedDict, total=False):
    """The cause of a run's failure, in the user's words, and the rule that names it (diagnose.explain)."""

    cause: str
    rule: str | None  # "CG101"...; None when no rule names it
    rule_name: str | None
    where: Where | None
    sim_limit: bool  # a limit of the simulated device, not a fault of the migration
    subject: dict[str, Any]  # the value an edit at its binding moves (name, kind, file, line...): migrate's


_ModuleClass = TypedDict("_ModuleClass", {"class": str})  # a keyword: the functional form names it


class ModuleAudit(_ModuleClass):
    """One module the script called itself (or that an event names), and where its calls ran."""

    name: str  # the script's name for it ("model", "model.encoder"), else its class
    calls: int
    device_calls: int
    cpu_calls: int
    param_devices: list[str]
    input_devices: list[str]
    bound: Any  # where the script holds it (file, line, name: Recorder.binding_of), or None


class AuditEvent(TypedDict):
    """A placement the audit saw happen (a CPU tensor reaching a device module...)."""

    kind: str  # "cpu-input-to-device-module", "device-input-to-cpu-module", "mixed-inputs", "non-leaf-parameter"
    module: str  # the module's name (ModuleAudit's), else its class
    where: Where | None


class LoaderRecord(TypedDict):
    """A DataLoader the user's code made, and how it draws its batches."""

    file: str
    line: int
    sampler: str  # the sampler's class name
    batch_size: int | None
    drop_last: bool
    batch_sampler: str  # the batch sampler's class name


class CapLoop(TypedDict):
    """The passes over DataLoaders that start at one line of the user's code (--max-steps)."""

    file: str | None
    line: int | None
    role: str  # "training" (it stepped) or "evaluation"
    passes: int
    batches: int
    steps: int
    passes_after_cap: int
    batches_after_cap: int
    skipped_steps: int  # steps skipped after the cap (the pass run dry)


class CapReport(TypedDict, total=False):
    """What --max-steps left the run to do (stepcap.StepCap.report)."""

    max_steps: int
    reached: bool  # the cap was reached
    ended: str | None  # how the run ended after the cap: "end", "loop", "ceiling", a status; None: not capped
    at: Where | None  # where the last counted step was taken
    stopped_at: Where | None  # where the cap had to end the run ("loop", "ceiling")
    skipped_steps: int
    backward_after_cap: int
    ceiling: int  # the backward passes or steps allowed after the cap before the run is ended
    lines_after_cap: int  # the lines of the user's code that ran after the cap
    loops: list[CapLoop]


class _NeedsDataBase(TypedDict):
    path: str  # the path, or the URL of a download
    what: str
    exists: bool  # the file exists, outside the folder each run copies
    where: Where | None  # the line that read it
    source: str | None  # that line's text


class NeedsData(_NeedsDataBase, total=False):
    """The data a run stopped on: a file that is not here, or a download that failed."""

    download: bool  # a download that failed (with or without --synthetic-data)


class MissingPackage(TypedDict):
    """A package the script imports that is not installed here."""

    name: str  # the import name
    pip: str  # the distribution to install
    where: Where | None  # the import's line
    source: str | None


class SyntheticMade(TypedDict):
    """A data set the stand-ins made (--synthetic-data)."""

    source: str  # "torchvision", "huggingface"...
    dataset: str
    split: str
    samples: int
    digest: str  # a fingerprint of the data: the runs must make the same


class Synthetic(TypedDict):
    """The stand-ins of a run under --synthetic-data."""

    torchvision: str  # "patched" or "stand-in"
    reason: str
    made: list[SyntheticMade]


class FlagOff(TypedDict):
    """An option of the script that picks the accelerator, not given."""

    option: str
    help: str


class DeviceChoiceRecord(TypedDict, total=False):
    """The script moved its model to the CPU, the device it chose itself (devicechoice)."""

    moved_to_cpu: list[Where]  # the .to() calls that moved it
    flags_off: list[FlagOff]


class ProcessGroup(TypedDict):
    """The process group a rank opened (None values: it could not be read)."""

    backend: str | None
    world_size: int | None
    rank: int | None


class RankInfo(TypedDict, total=False):
    """What one rank under torchrun records besides every run's result (distributed_child)."""

    rank: int
    local_rank: int | None
    world_size: int | None
    process_group: ProcessGroup | None  # None: the rank opened none
    ddp_modules: int  # DistributedDataParallel wrappers built
    distributed_samplers: int
    shuffling_samplers: int
    set_epoch_calls: int
    param_checksums: list[Any]  # [sum, sum of squares, count] of the parameters after each counted step


class _RefusedWriteBase(TypedDict):
    path: str
    call: str  # the audit event or system call
    place: str  # "original" (the user's folder) or "elsewhere"
    by: str  # "audit hook" or "write watch (seccomp)"


class RefusedWrite(_RefusedWriteBase, total=False):
    """A write of the run that was refused outside its copy."""

    pid: int


class ParamMismatch(TypedDict):
    """The first step after which some rank's parameters differ from rank 0's."""

    step: int
    ranks: list[int]  # rank 0 and those that differ
    checksums: dict[str, list[float]]  # rank -> [sum, sum of squares]
    rel_diff: float


class ParamAgreement(TypedDict):
    """The ranks' parameter checksums against rank 0's, step by step."""

    params_equal: bool | None  # None: no step to compare
    param_steps_compared: int
    param_max_rel_diff: float
    param_first_mismatch: ParamMismatch | None
    param_rtol: float


class RankSummary(TypedDict):
    """One rank of a distributed run, as the merged result keeps it."""

    rank: int
    status: str  # a run's status, or "stopped" (torchrun ended it after another rank failed)
    steps: int
    losses_recorded: int
    first_loss: float | None
    last_loss: float | None
    process_group: ProcessGroup | None
    ddp_modules: int
    distributed_samplers: int
    shuffling_samplers: int
    set_epoch_calls: int
    exception: ExceptionRecord | None  # the rank's, when it failed
    last_param_checksum: list[float] | None


class DistributedSummary(TypedDict, total=False):
    """What only several ranks show (verify --nproc): the run's "distributed"."""

    nproc: int
    launcher: str
    backend: str | None
    steps_per_rank: list[int]
    ranks_trained: int
    failed_rank: int | None  # the rank whose failure ended the run
    ranks: list[RankSummary]
    notes: list[str]
    wall_seconds: float
    # ParamAgreement's
    params_equal: bool | None
    param_steps_compared: int
    param_max_rel_diff: float
    param_first_mismatch: ParamMismatch | None
    param_rtol: float


# -- verify --speed: what the device run did per step (the child's), and where the GPU would idle ---------


class SpeedPlace(TypedDict):
    """A line of the user's code that an op, a copy or a synchronisation came from."""

    file: str  # shown
    line: int
    source: str  # the line's text, stripped


class SpeedStep(TypedDict):
    """One training step's counts and host times (from the end of a step to the end of the next)."""

    wall_s: float
    kernel_s: float  # the CPU time inside the simulated kernels (and the counting): what a GPU does not spend on the host
    data_wait_s: float  # waiting for the next batch of a DataLoader
    host_s: float  # wall_s - kernel_s - data_wait_s: the host's own work
    ops: int  # the ops on device tensors (views included)
    kernels: int  # those that launch a kernel (views, metadata and copies not)
    syncs: int  # host synchronisations: scalar reads, copies to the host, data-dependent shapes, prints
    copies_in: int  # copies to the device
    bytes_in: int
    pinned_in: int  # of them, from pinned memory
    copies_out: int  # copies to the host
    bytes_out: int
    allocations: int  # new device tensors (views not)
    allocated_bytes: int


class SpeedLine(TypedDict):
    """What one line does every step: its syncs or its copies to the device (medians over the steps after the first)."""

    kind: str  # "sync" or "copy"
    place: int  # index into SpeedProfile's places
    what: str  # sync: "scalar", "to_host", "shape", "print"; copy: the source, "batch", "slice", "same", "made"
    per_step: float
    bytes_per_step: float
    pinned: bool  # copy: from pinned memory
    non_blocking: bool  # copy: .to(..., non_blocking=True)
    steps: int  # the steps (after the first) in which the line did it at all
    source_bytes: int  # a copy of a slice or of the same tensor: the whole CPU tensor's size (else 0)
    dtypes: list[str]  # a scalar read: the dtypes of the values read there ("float32", "int64"), else []


class SpeedLoader(TypedDict):
    """A DataLoader the steps drew batches from."""

    place: int  # where the user's code made it (or first drew from it): index into places, -1 not known
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    wait_s: float  # median wait for a batch per step (steps after the first)
    batches: float  # batches drawn per step (median)


class SpeedDetail(TypedDict):
    """A step measured op by op, in order: what the estimate replays on a named GPU (the first of the steps so
    measured, each host time the median of theirs: speed.counts).

    Each event is a list, its first item its kind and its second the host's own time since the event before:
    ["k", host_s, flops, bytes, math, place, kernels], a kernel (math: "fp32", "tf32", "half", "fp64");
    ["s", host_s, what, bytes, place], a synchronisation; ["h", host_s, bytes, pinned, non_blocking, place,
    source], a copy to the device; ["w", host_s, seconds, loader], a wait for a batch; ["e", host_s], the end."""

    step: int  # which step (1 = the first)
    events: list[list[Any]]
    flops: float  # the step's FLOPs (torch.utils.flop_counter's formulas)
    merged: int  # kernels merged into the one before them past the events' cap


class SpeedConvolutions(TypedDict):
    """The run's convolutions: how many input shapes they ran with, and whether cuDNN chose their algorithms by
    timing them (torch.backends.cudnn.benchmark, as the run ended)."""

    shapes: int
    place: int  # the user's line of the first (index into places), -1 none
    fixed: bool  # after the second step, at most two steps brought a new shape (an epoch's last batch)
    cudnn_benchmark: bool


class SpeedProfile(TypedDict, total=False):
    """What verify --speed records in the device run (speed.counts)."""

    mode: str  # "sim" or "cuda"
    steps: list[SpeedStep]  # every step; the first holds the run's start
    per_step: SpeedStep | None  # the medians over the steps after the first; None below two steps
    places: list[SpeedPlace]
    lines: list[SpeedLine]
    loaders: list[SpeedLoader]
    detail: SpeedDetail | None  # None below two steps
    convolutions: SpeedConvolutions


class SpeedCause(TypedDict):
    """One thing that keeps the GPU idle, with its line and its fix."""

    kind: str  # "loader", "sync", "copy", "made", "launches", "cudnn"
    copied: str  # a copy's source: "batch", "slice", "same", "made"; else ""
    source_bytes: int  # a copy of a slice or of the same tensor: the whole CPU tensor's size (else 0)
    dtypes: list[str]  # a scalar read: the dtypes of the values read there ("float32", "int64"), else []
    file: str | None
    line: int | None
    source: str
    per_step: float  # syncs, copies, kernels a step; the loader's batches a step
    bytes_per_step: float
    seconds: float  # the idle time it explains a step: how much shorter the estimated step is without it
    share: float  # of the estimated step
    what: str  # in words
    fix: str


class SpeedEstimate(TypedDict):
    """One step on the named GPU, estimated (speed.model)."""

    gpu: str
    step_s: float
    busy_s: float  # the kernels' own work at the card's peak FLOP/s or bandwidth
    launch_s: float  # the kernels' launch overhead
    copy_s: float  # the copies to the device
    host_s: float  # the host's own work and its waits for batches (measured here)
    idle_fraction: float  # of the step, the GPU runs no kernel
    flops: float


class SpeedReport(TypedDict, total=False):
    """verify --speed's section: where the GPU would idle, and why."""

    run: str  # the run measured
    gpu: str
    steps: int  # the steps measured
    counts: SpeedStep | None  # per step, medians over the steps after the first
    estimate: SpeedEstimate | None
    causes: list[SpeedCause]
    summary: str
    omits: str  # what the estimate leaves out
    note: str  # why there is no estimate


# -- a run's result ------------------------------------------------------------------------------------


class _RunResultBase(TypedDict):
    mode: str  # cpu | sim | cuda | sim-mps | mps | xpu
    # ok | max_steps | exit | error | needs_data; the parent's: timeout | crashed | wrote-originals
    status: str
    exit_code: int | None  # the script's sys.exit code; None when it did not exit (stopped, crashed)
    losses: list[float]  # the loss at each backward call
    steps: int  # the training steps counted (optimizer steps, and updates by hand)
    backward_calls: int
    step_times: list[float]  # seconds between consecutive steps
    device_forward_calls: int  # module calls on the device, nested modules counted
    cpu_forward_calls: int
    modules: list[ModuleAudit]
    events: list[AuditEvent]
    exception: ExceptionRecord | None
    diagnosis: Diagnosis | None
    device_rng: bool  # the run drew from the device's random generator: compared by trend


class RunResult(_RunResultBase, total=False):
    """One run's result: what the child writes (child.py, distributed_child.py) and the parent adds (runner)."""

    step_kinds: dict[str, int]  # steps by kind: "optimizer", or by hand (manualsteps)
    trained_devices: list[str]  # the devices of the tensors the optimizers stepped
    loaders: list[LoaderRecord]
    mirrored_draws: int  # the simulated device's random draws, mirrored from the CPU generator
    cuda_queries: int  # torch.cuda queries under the simulated mps device
    seed: int
    script_seconds: float
    setup_seconds: float
    torch: str  # torch's version
    device_name: str  # the GPU's name, or the simulated device's
    cap: CapReport | None  # None without --max-steps
    script_shown: str  # the script's path as shown
    lines: dict[str, list[int]]  # shown path -> the lines of it that ran
    sources: dict[str, list[str]]  # shown path -> its text's lines (each user file compiled)
    in_root: dict[str, str]  # shown path -> its path inside the copied folder
    isolation: dict[str, Any]  # how the run was confined (sandbox.isolation's record: kind, why, watch...)
    refused_writes: list[RefusedWrite]  # into the user's folder
    refused_elsewhere: list[RefusedWrite]  # refused by the kernel outside the user's folder: told, not judged
    device_choice: DeviceChoiceRecord
    rank: RankInfo  # one rank's record under torchrun (the merged result drops it)
    needs_data: NeedsData | None
    missing_package: MissingPackage
    synthetic: Synthetic
    blocked_in_native_code: bool  # a rank's result written by its watchdog (a collective that never returned)
    finished_at: int | None  # when a rank's result was written (ns): which rank failed first (merge drops it)
    distributed: DistributedSummary  # the merged result of the ranks (verify --nproc)
    speed: SpeedProfile  # verify --speed: the device run's counts per step and one step op by op
    # the parent's
    wall_seconds: float
    returncode: int | None  # the child's (or torchrun's) exit code
    stdout_tail: str
    stderr_tail: str
    workdir: str  # the run's folder, kept (--keep)


class VerifiedRun(RunResult):
    """A run in verify's report: its result, with the run's plan."""

    label: str  # "original (cpu)", "migrated (sim)"...
    role: str  # "original" | "migrated"
    script: str  # as the user gave it


# -- verify's report -----------------------------------------------------------------------------------


class _ReasonBase(TypedDict):
    run: str  # the run's label
    cause: str
    rule: str | None
    rule_name: str | None
    where: Where | None


class Reason(_ReasonBase, total=False):
    """Why the verdict is not a pass: a finding about one run."""

    sim_limit: bool  # a limit of the simulated device (an error, not a fail)
    unproven: bool  # code the migrated run did not reach (the verdict "unproven")
    missing_package: str  # a package not installed here (an error): its import name
    idle_original: bool  # the original trains nowhere here (0 steps): nothing to prove (an error)


class Divergence(TypedDict, total=False):
    """Where two runs' losses part."""

    step: int
    reference: float | None  # the reference's loss there (the last fifth's mean, by trend)
    value: float | None  # the run's
    rel_diff: float | None  # a comparison's tail_rel_diff (paired), which a distributed one leaves None
    abs_diff: float
    tolerance: float  # the tolerance at that step (step by step)
    which: str  # "last" or "direction" (distributed)
    reference_first: float  # distributed: the first fifths' means
    first: float


class ComparisonBand(TypedDict, total=False):
    """The measured band a step-by-step comparison was held to."""

    max: float  # the band's largest value over the steps compared
    factor: float
    used: bool  # some step was within the band only


class PairedTest(TypedDict):
    """A paired t test of the step-wise loss differences."""

    steps: int
    mean_diff: float
    t: float
    limit: float


class Batching(TypedDict):
    """The first DataLoader the two runs made differently."""

    file: str
    line: int
    what: str  # the attribute that differs: sampler, batch_size, drop_last, batch_sampler
    reference: Any
    value: Any


class _ComparisonBase(TypedDict):
    method: str  # "step", "trend", "paired", "distributed"
    compared: int  # the steps compared
    rtol: float
    max_rel_diff: float | None
    first_divergence: Divergence | None


class Comparison(_ComparisonBase, total=False):
    """One run's losses against the reference's (compare.py, distributed.compare)."""

    ok: bool
    run: str  # the run's label (verify's)
    reference: str  # the reference's label (verify's)
    note: str | None
    lengths: list[int]  # the losses of the reference and of the run
    atol: float
    tolerance_grew: bool  # some step was within the grown tolerance only
    band: ComparisonBand
    mirrored_draws: int
    batching: Batching
    paired: PairedTest | None  # None: too few steps
    # by trend: the means of the first and last fifths
    reference_first: float
    reference_last: float
    first: float
    last: float
    tail_rel_diff: float | None
    head_rel_diff: float | None
    reference_flat: bool  # the reference hardly moved: nothing to hold the run to
    # distributed
    step_first_divergence: Divergence | None
    k: list[int]  # the steps in a fifth, the reference's and the run's
    scale: float
    same_direction: bool


class MissingLine(TypedDict):
    """A line the original ran that did not run in the migrated run."""

    file: str  # the migrated file
    line: int
    original_line: int
    source: str


class _CoverageBase(TypedDict):
    ran: int  # the lines the original ran (those set aside not counted)
    reached: int
    missing: list[MissingLine]  # the first ones
    missing_count: int
    set_aside: int  # lines in a branch on the device


class Coverage(_CoverageBase, total=False):
    """Did every line the original ran also run in a migrated run (reach.reached)?"""

    run: str
    reference: str


class NeededData(NeedsData):
    """The data the runs stopped on, one entry per path."""

    runs: list[str]  # the labels of the runs that needed it


class BandMeasure(TypedDict):
    """The original run again with the last bit of every op's result perturbed (band.py)."""

    run: str
    status: str
    values: list[float]  # its relative divergence from the reference, step by step
    max: float | None


class _VerifySettingsBase(TypedDict):
    script: str
    against: str | None
    args: list[str]
    device: str
    max_steps: int | None
    seed: int
    timeout: float
    jobs: int
    synthetic_data: bool
    clean_env: bool
    env_allow: list[str]
    nproc: int | None


class VerifySettings(_VerifySettingsBase, total=False):
    """How verify was asked to run."""

    device_flag: str  # the script's opt-in GPU flag, given to the device runs
    speed: str  # verify --speed: the GPU the estimate is for (speed.gpus's key)


class _VerifyReportBase(TypedDict):
    verdict: str  # pass | fail | error | needs-data | unproven
    reasons: list[Reason]
    comparisons: list[Comparison]
    needs_data: list[NeededData]
    coverage: list[Coverage]


class VerifyReport(_VerifyReportBase, total=False):
    """What verify() returns: judge()'s verdict, then the runs and the settings."""

    band: BandMeasure  # when measured, or given (migrate's rounds)
    runs: list[VerifiedRun]  # set by verify() after judge()
    settings: VerifySettings  # likewise
    speed: SpeedReport  # verify --speed


# -- migrate's report ----------------------------------------------------------------------------------


class _RoundBase(TypedDict):
    round: int  # 0: the static rewrite


class Round(_RoundBase, total=False):
    """One round of migrate: the static rewrite (round 0), or one edit at a located cause."""

    # round 0
    what: str
    files: list[str]  # the files the rewrite changed
    errors: list[str]
    # a repair
    evidence: str  # verify's cause
    rule: str
    name: str  # the value moved
    kind: str  # Evidence.kind: batch | tensor | attribute | module | numpy | use | conversion | trained | rule
    bound_at: str  # file:line (file:cell N:line) of the edit
    met: str  # where the run met the value
    file: str
    line: int
    how: str  # loop | assign | unpack | attribute | host | rule...
    edit: str  # the edit's text
    cell: int  # a notebook's cell
    taken_back: str  # why the edit was taken back


class StaticMiss(TypedDict, total=False):
    """What the static pass missed: an edit a round made and kept (all keys but cell always there: migrate()
    builds it with a ** that mypy cannot check)."""

    rule: str
    file: str
    line: int
    name: str
    how: str
    cell: int  # a notebook's cell


class Unreached(TypedDict):
    """Where a capped migrated run was stopped before the script's end."""

    run: str
    file: str | None
    line: int | None
    ended: str | None  # CapReport's "ended" (None only where the cap was not reached: not listed)


class _MigrateReportBase(TypedDict):
    script: str
    proven: bool
    ending: str  # why the rounds ended
    device_flag: str | None  # the script's opt-in GPU flag, when the device run was given it
    cannot_run: str | None  # why no verdict can be reached here
    rounds: list[Round]
    taken_back: list[Round]
    static_misses: list[StaticMiss]
    verify: VerifyReport  # the last round's
    unreached: list[Unreached]
    changed: dict[str, bytes]  # user's path -> the migrated bytes
    originals: dict[str, bytes]  # user's path -> the bytes read at the start
    seconds: float


class SpeedEditRecord(TypedDict, total=False):
    """A cause migrate --speed looked at: the edit kept, or the edit taken back or none, and why."""

    cause: str  # the cause's kind (SpeedCause's)
    what: str  # the cause in words
    file: str | None
    line: int | None  # in the user's file
    seconds: float  # the idle time the cause explained a step
    kind: str  # the edit's (speededits.SpeedEdit's): workers, pinned, on_device, sum_on_device, cudnn_benchmark
    edit: str  # the edited line
    how: str
    why: str  # taken back, or no edit: why


class SpeedMigration(TypedDict):
    """migrate --speed: the estimate before and after the speed edits, the edits kept and the others."""

    gpu: str
    before: SpeedEstimate | None
    after: SpeedEstimate | None
    summary_before: str
    summary_after: str
    edits: list[SpeedEditRecord]
    not_edited: list[SpeedEditRecord]
    losses_same: int  # the device run's losses, equal before and after the edits
    note: str  # why no speed edit was tried (not proven, a notebook), else ""


class MigrateReport(_MigrateReportBase, total=False):
    """What migrate() returns (nothing written)."""

    written: list[str]  # the files written (the cli's --in-place)
    speed: SpeedMigration  # --speed, once proven
