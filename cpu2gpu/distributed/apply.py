"""Write a DDP plan into the module: one transformer, keyed on the plan's nodes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Union

import libcst as cst

from ..analysis.classdefs import walk
from .index import FileIndex, code_of
from .plan import SAFE_ON_WRAPPER, Plan, dataset_argument, is_wrapper


@dataclass
class Names:
    """How the new code spells what it uses; an import is added only where its name is free."""

    dist: str
    ddp: str
    sampler: str
    os: str
    local_rank: str
    imports: list[str]

    @classmethod
    def choose(cls, index: FileIndex) -> "Names":
        taken = index.names_bound
        names = index.imports.names
        imports: list[str] = []

        def pick(local: str, qualified: str, statement: str) -> str:
            if names.get(local) == qualified:
                return local
            if local in taken:
                return qualified
            imports.append(statement)
            return local

        os_name = next((local for local, full in names.items() if full == "os"), None)
        if os_name is None:
            os_name = pick("os", "os", "import os")
        return cls(
            dist=pick("dist", "torch.distributed", "import torch.distributed as dist"),
            ddp=pick("DDP", "torch.nn.parallel.DistributedDataParallel",
                     "from torch.nn.parallel import DistributedDataParallel as DDP"),
            sampler=pick("DistributedSampler", "torch.utils.data.distributed.DistributedSampler",
                         "from torch.utils.data.distributed import DistributedSampler"),
            os=os_name,
            local_rank=next(n for n in ("local_rank", "ddp_local_rank", "local_rank_") if n not in taken),
            imports=imports,
        )


def setup_lines(names: Names, torch_name: str, accelerator: bool) -> list[str]:
    """This process's GPU (torchrun's LOCAL_RANK) made current, and the process group, right after the
    imports: everything after may use it. The script's own device ("cuda", or the accelerator's
    device) then means this process's GPU, so the device line needs no change."""
    dist, t, rank = names.dist, torch_name, names.local_rank
    if accelerator:  # as PyTorch's own DDP examples (torch 2.7+) write it
        return [
            f'{rank} = int({names.os}.environ["LOCAL_RANK"])',
            f"if {t}.accelerator.is_available():\n    {t}.accelerator.set_device_index({rank})",
            f"{dist}.init_process_group({dist}.get_default_backend_for_device("
            f'{t}.accelerator.current_accelerator() if {t}.accelerator.is_available() else "cpu"))',
        ]
    return [
        f'{rank} = int({names.os}.environ["LOCAL_RANK"])',
        f"if {t}.cuda.is_available():\n    {t}.cuda.set_device({rank})",
        f'{dist}.init_process_group("nccl" if {t}.cuda.is_available() else "gloo")',
    ]


class ApplyPlan(cst.CSTTransformer):
    def __init__(self, plan: Plan, names: Names, torch_name: str, accelerator: bool) -> None:
        super().__init__()
        self.plan, self.names, self.index = plan, names, plan.index
        self.setup = [cst.parse_statement(line + "\n") for line in setup_lines(names, torch_name, accelerator)]
        self.available = f"{torch_name}.{'accelerator' if accelerator else 'cuda'}.is_available()"
        self.mkdirs = {id(call) for call in plan.mkdirs}
        self.pinned = {id(string) for string in plan.pinned}
        self.guards = {id(stmt) for stmt in plan.guards}
        self.loaders = {id(call) for call in plan.train_loaders}
        self.loads = {id(call) for call in plan.loads}
        self.epochs = {id(loop): (loader, epoch) for loop, loader, epoch in plan.set_epochs}
        self.rank0 = cst.parse_expression(f"{names.dist}.get_rank() == 0")
        self.bound_datasets: dict[int, tuple[str, cst.BaseExpression]] = {}  # to bind: loader call -> (name, value)
        self.dataset_names: dict[int, str] = {}  # loader call -> the name its data set is bound to
        self.redirected = 0
        self.guard_ifs: set[int] = set()  # the rank-0 ifs written: neighbours merge into one
        self.main_block: Optional[cst.If] = _main_block(self.index.module)

    # -- statements ---------------------------------------------------------------------------

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
                                  ) -> Union[cst.BaseStatement, cst.FlattenSentinel]:
        out: list[cst.BaseStatement] = []
        for call_id, (name, value) in list(self.bound_datasets.items()):
            if self._contains(original, call_id):
                out.append(cst.parse_statement(f"{name} = {code_of(value)}\n"))
                del self.bound_datasets[call_id]
        if id(original) in self.guards:
            body = updated.with_changes(leading_lines=())
            guarded = cst.If(test=self.rank0, body=cst.IndentedBlock([body]), leading_lines=updated.leading_lines)
            self.guard_ifs.add(id(guarded))
            out.append(guarded)
        else:
            out.append(updated)
        return cst.FlattenSentinel(out) if len(out) > 1 else out[0]

    def on_leave(self, original: cst.CSTNode, updated):
        """Statements around one: the sampler's epoch before a training pass, the wrap after the model."""
        result = super().on_leave(original, updated)
        if original is not self.plan.wrap_after and id(original) not in self.epochs:
            return result
        assert not isinstance(result, cst.RemovalSentinel)  # no statement of the plan is removed
        nodes = list(result.nodes) if isinstance(result, cst.FlattenSentinel) else [result]
        if id(original) in self.epochs:
            loader, epoch = self.epochs[id(original)]
            call = cst.parse_statement(f"{loader}.sampler.set_epoch({epoch})\n")
            nodes[0], call = nodes[0].with_changes(leading_lines=()), call.with_changes(leading_lines=nodes[0].leading_lines)
            nodes.insert(0, call)
        if original is self.plan.wrap_after:
            target = self.plan.wrap_target
            nodes.append(cst.parse_statement(f"{target} = {self.names.ddp}({target}, device_ids=[{self.names.local_rank}] "
                                             f"if {self.available} else None)\n"))
        return cst.FlattenSentinel(nodes)

    def _contains(self, stmt: cst.CSTNode, node_id: int) -> bool:
        return any(id(n) == node_id for n in walk(stmt))

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        return updated.with_changes(body=self._merge_guards(updated.body))

    def _merge_guards(self, body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        out: list[cst.BaseStatement] = []
        for stmt in body:
            last = out[-1] if out else None
            if isinstance(stmt, cst.If) and id(stmt) in self.guard_ifs and isinstance(last, cst.If) \
                    and id(last) in self.guard_ifs and not stmt.leading_lines:
                merged = last.with_changes(body=last.body.with_changes(body=[*last.body.body, *stmt.body.body]))
                self.guard_ifs.add(id(merged))
                out[-1] = merged
            else:
                out.append(stmt)
        return out

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:
        if original is self.main_block:
            end = cst.parse_statement(f"{self.names.dist}.destroy_process_group()\n")
            return updated.with_changes(body=updated.body.with_changes(body=[*updated.body.body, end]))
        return updated

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        body = self._merge_guards(updated.body)
        if self.main_block is None:
            end = cst.parse_statement(f"{self.names.dist}.destroy_process_group()\n")
            body.append(end.with_changes(leading_lines=[cst.EmptyLine()]))
        imports = [cst.parse_statement(line + "\n") for line in self.names.imports]
        at = _after_imports(body)
        rest = body[at:]
        setup = [self.setup[0].with_changes(leading_lines=[cst.EmptyLine()]), *self.setup[1:]]
        first = rest[0] if rest else None  # (every statement is one of these two)
        if isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) and not first.leading_lines:
            rest[0] = first.with_changes(leading_lines=[cst.EmptyLine()])
        return updated.with_changes(body=[*body[:at], *imports, *setup, *rest])

    # -- expressions --------------------------------------------------------------------------

    def visit_Call(self, node: cst.Call) -> None:
        if id(node) in self.loaders:
            dataset = dataset_argument(node)
            if dataset is not None and not isinstance(dataset, (cst.Name, cst.Attribute)):
                name = self._free("train_dataset")  # made once, for the loader and its sampler
                self.dataset_names[id(node)] = name
                self.bound_datasets[id(node)] = (name, dataset)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if id(original) in self.loaders:
            return self._shard(original, updated)
        device_name = self.plan.device_name
        if id(original) in self.loads and device_name is not None:  # (the plan finds loads only with one)
            return _with_keyword(updated, "map_location", cst.Name(device_name), keep=("cpu",))
        if id(original) in self.mkdirs and len(updated.args) == 1:
            # `if not exists: os.mkdir(d)` on every rank at once: one of them finds it made
            made = cst.parse_expression(f"{self.names.os}.makedirs({code_of(updated.args[0].value)}, exist_ok=True)")
            return made
        return updated

    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString) -> cst.SimpleString:
        if id(original) not in self.pinned:
            return updated
        quote = updated.quote
        return updated.with_changes(value=updated.prefix + quote + "cuda" + quote)  # this rank's GPU

    def _shard(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        bound = self.dataset_names.get(id(original))
        dataset = cst.parse_expression(bound) if bound else dataset_argument(updated)
        assert dataset is not None  # the plan refuses a training loader without one
        shuffle = next((a.value for a in updated.args if a.keyword is not None and a.keyword.value == "shuffle"), None)
        args = []
        for position, arg in enumerate(updated.args):
            if arg.keyword is not None and arg.keyword.value == "shuffle":
                continue
            if bound and ((arg.keyword is None and position == 0) or (arg.keyword and arg.keyword.value == "dataset")):
                arg = arg.with_changes(value=cst.parse_expression(bound))
            if arg.keyword is not None and arg.keyword.value == "batch_size" and id(original) in self.plan.divided_batches:
                per_rank = f"max(1, {code_of(arg.value)} // {self.names.dist}.get_world_size())"
                arg = arg.with_changes(value=cst.parse_expression(per_rank))
            args.append(arg)
        sampler = f"{self.names.sampler}({code_of(dataset)}, shuffle={code_of(shuffle) if shuffle is not None else 'False'})"
        args = _comma_separated(args + [cst.Arg(keyword=cst.Name("sampler"), value=cst.parse_expression(sampler),
                                                 equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))])
        return updated.with_changes(args=args)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        if original.attr.value in SAFE_ON_WRAPPER or not is_wrapper(self.index, self.plan.receivers, original.value):
            return updated
        if self._in_wrap_line(original):
            return updated
        self.redirected += 1
        return updated.with_changes(value=cst.Attribute(updated.value, cst.Name("module")))

    def _in_wrap_line(self, node: cst.CSTNode) -> bool:
        """In the statement the wrap follows (the model is still bare there)."""
        return any(up is self.plan.wrap_after for up in self.index.ancestors(node))

    def _free(self, name: str) -> str:
        taken = self.index.names_bound
        candidate, n = name, 1
        while candidate in taken:
            n += 1
            candidate = f"{name}_{n}"
        taken.add(candidate)
        return candidate


def _main_block(module: cst.Module) -> Optional[cst.If]:
    for stmt in module.body:
        if isinstance(stmt, cst.If) and "__name__" in code_of(stmt.test) and "__main__" in code_of(stmt.test):
            return stmt
    return None


def _after_imports(body: Sequence[cst.BaseStatement]) -> int:
    at = 0
    for position, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine) and stmt.body and isinstance(stmt.body[0], (cst.Import, cst.ImportFrom)):
            at = position + 1
        elif position == 0 and isinstance(stmt, cst.SimpleStatementLine) and stmt.body \
                and isinstance(stmt.body[0], cst.Expr) and isinstance(stmt.body[0].value, cst.SimpleString):
            at = 1  # the docstring
        elif at or position > 0:
            break
    return at


def _with_keyword(call: cst.Call, keyword: str, value: cst.BaseExpression, keep: tuple = ()) -> cst.Call:
    args = list(call.args)
    for position, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == keyword:
            if isinstance(arg.value, cst.SimpleString) and arg.value.evaluated_value in keep:
                return call
            args[position] = arg.with_changes(value=value)
            return call.with_changes(args=args)
    new = cst.Arg(keyword=cst.Name(keyword), value=value,
                  equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
    return call.with_changes(args=_comma_separated(args + [new]))


def _comma_separated(args: list[cst.Arg]) -> list[cst.Arg]:
    out = []
    for position, arg in enumerate(args):
        last = position == len(args) - 1
        if not last and arg.comma is cst.MaybeSentinel.DEFAULT:
            arg = arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        if last and not isinstance(arg.comma, cst.Comma):
            arg = arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)
        out.append(arg)
    return out
