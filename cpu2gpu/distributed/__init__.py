"""``rewrite --distributed ddp``: a single-process training script made to run under torchrun with
DistributedDataParallel, on top of the device migration; or the reason it is left as it is."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from .apply import ApplyPlan, Names
from .plan import Refusal, make_plan, refusal_of

__all__ = ["Migration", "Refusal", "migrate_bytes_to_ddp", "migrate_to_ddp"]


@dataclass
class Migration:
    module: cst.Module
    summary: list[str]  # what was done, a line each (the diff's summary)


def migrate_to_ddp(module: cst.Module, accelerator: bool = False) -> Migration:
    """``module``: the device-migrated code. Raises ``Refusal`` with the reason when the migration
    cannot be done with certainty; nothing is changed then."""
    plan = make_plan(module)
    names = Names.choose(plan.index)
    torch_name = next((local for local, full in plan.index.imports.names.items() if full == "torch"), "torch")
    apply = ApplyPlan(plan, names, torch_name, accelerator)
    new = module.visit(apply)
    return Migration(new, _summary(plan, apply, accelerator))


def migrate_bytes_to_ddp(original: bytes, migrated: bytes, accelerator: bool = False) -> tuple[bytes, list[str]]:
    """The DDP migration of a file's device-migrated bytes, in the file's own encoding. The original is
    read first, so that a refusal names the lines as the user wrote them."""
    refusal_of(cst.parse_module(original))
    migration = migrate_to_ddp(cst.parse_module(migrated), accelerator)
    return migration.module.bytes, migration.summary


def _summary(plan, apply: ApplyPlan, accelerator: bool) -> list[str]:
    backend = "the backend of the device (get_default_backend_for_device)" if accelerator \
        else "nccl on CUDA, gloo on the CPU"
    lines = [
        f"process group from torchrun's environment (LOCAL_RANK, RANK, WORLD_SIZE) after the imports, {backend}; "
        "each process's GPU made current (the script's device then means it); destroyed at the end",
        f"`{plan.wrap_target}` wrapped in DistributedDataParallel after it is made"
        + (f"; {apply.redirected} use(s) of the bare model (state_dict, own methods) through `.module`"
           if apply.redirected else ""),
        f"{len(plan.train_loaders)} training DataLoader(s) given a DistributedSampler (their shuffle moved into "
        "the sampler)",
    ]
    if plan.divided_batches:
        lines.append(f"{len(plan.divided_batches)} training batch size(s) divided by the world size: the global "
                     "batch, and so the training, stay the original's")
    for size in plan.kept_batches:
        lines.append(f"batch size `{size}` kept per process (the code reads it elsewhere): the global batch is "
                     "N times the original's; scale the learning rate if the training needs it")
    for loop, loader, epoch in plan.set_epochs:
        lines.append(f"`{loader}.sampler.set_epoch({epoch})` before each pass over `{loader}`")
    if plan.eval_loaders:
        lines.append(f"{plan.eval_loaders} evaluation DataLoader(s) left whole: every rank evaluates the whole set "
                     "with the same parameters (the same figures on every rank, so decisions taken on them agree); "
                     "printed on rank 0")
    if plan.guards:
        lines.append(f"{len(plan.guards)} print/log/save line(s) run on rank 0 only")
    if plan.pinned:
        lines.append('"cuda:0" in the device line made "cuda": each rank\'s own GPU, not GPU 0 for all')
    if plan.mkdirs:
        lines.append(f"{len(plan.mkdirs)} os.mkdir made os.makedirs(..., exist_ok=True): every rank runs it at once")
    if plan.loads:
        lines.append(f"{len(plan.loads)} torch.load call(s) map to each rank's device")
    return lines
