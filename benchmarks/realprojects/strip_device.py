"""Make the CPU version of a project's files: remove the authors' device code, and record each move.

What counts as a **move** (recorded, one per call or keyword):

- ``X.to(D)`` / ``X.to(device=D, ...)`` where ``D`` is device-ish (its code mentions ``device``,
  ``dev``, ``dv``, ``cuda``, ``gpu``, or it is ``torch.device(...)``, or a string ``"cuda..."`` /
  ``"cpu"``): the call is replaced by ``X`` (or, when other arguments remain such as ``dtype=``,
  only the device argument is dropped: ``X.to(dtype=...)``);
- ``X.cuda()`` / ``X.cuda(args.gpu)``: replaced by ``X``;
- a ``device=D`` keyword of a tensor factory (``torch.zeros/ones/arange/rand*/empty/full/eye/
  tensor/linspace/...``, ``*_like``, ``x.new_*``): the keyword is dropped.

"What was moved" is the code of ``X`` (for a factory: the call without its ``device=``).  A move
whose device comes from another tensor (``.to(x.device)``, ``device=idx.device``, a local
``dv = 'cuda' if x.is_cuda else 'cpu'``, a ``.cuda()`` under ``if w.is_cuda:``) is recorded with
``follow: true`` (device-following code that a CPU-only author may or may not write).

Statements left empty by the removal are dropped: ``model.cuda()`` / ``model.to(device)`` as a
statement, ``x = x.cuda()``, ``a, b = a.to(d), b.to(d)``.

What counts as **setup** (removed where simple, recorded apart, never counted as a move):

- a guard ``if args.cuda:`` / ``if use_cuda:`` / ``if opt.cuda:`` / ``if args.gpu:`` /
  ``if torch.cuda.is_available():`` / ``if x.is_cuda:`` (no ``else``) whose body, after the moves
  are gone, is empty or holds only simple statements that name ``torch.cuda.``
  (``torch.cuda.manual_seed``, ``torch.cuda.set_device``...);
- a one-target assignment whose value names ``torch.device(``, ``cuda`` or ``is_available``
  (``device = torch.device(...)``, ``self.device = ...``, ``args.cuda = not args.no_cuda and ...``,
  ``use_cuda = torch.cuda.is_available()``) once its target is referenced nowhere else (a plain
  name: in its file; a dotted name such as ``args.cuda`` / ``self.device``: in all project files).

Left as they are (plumbing that is not simple, or not a move): argparse options (``--cuda``,
``--no-cuda``, ``-gpu``), ``torch.load(..., map_location=...)``, ``torch.autocast(device.type...)``,
``torch.cuda.amp.GradScaler``, ``with torch.cuda.device(...)``, ``cudnn.benchmark = True``,
``nn.DataParallel``, ``isinstance(x, torch.cuda.FloatTensor)``, ``device`` parameters of functions
and ``device=`` keywords of non-factory calls (``train_model(device=device)``), and any setup
line whose target is still used.

    python strip_device.py SRC_DIR DST_DIR FILE... [--report removed.json]

The module is also imported by measure.py: ``find_moves(code)`` returns the move sites of any
code with the same recognition rules (the rewritten files are read with it).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from pathlib import Path

warnings.simplefilter("ignore", SyntaxWarning)  # the projects' own `x is 'lit'`

import libcst as cst  # noqa: E402  (after the warnings filter: libcst's import compiles the projects' code)
from libcst.metadata import MetadataWrapper, PositionProvider  # noqa: E402

FACTORIES = {
    "zeros", "ones", "empty", "full", "eye", "arange", "range", "linspace", "logspace",
    "rand", "randn", "randint", "randperm", "normal", "tensor", "as_tensor", "sparse_coo_tensor",
    "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like",
    "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "tril_indices", "triu_indices",
    "FloatTensor", "LongTensor", "Tensor", "Generator", "bernoulli", "multinomial",
}
MODULE_ROOTS = {"torch", "np", "numpy", "nn", "F", "math", "random"}
CONFIG_ROOTS = {"self", "args", "opt", "config", "cfg", "trainer", "hparams", "params", "conf", "C"}
DEVICE_RE = re.compile(r"device|\bdev\b|\bdv\b|cuda|gpu", re.I)
STR_DEVICE_RE = re.compile(r"""^[rbuf]*['"](cuda(:\d+)?|cpu|mps)['"]$""")
FLAG_RE = re.compile(
    r"^(?:(?:self\.)?(?:args|opt|config|cfg|hparams|params)\.(?:cuda|gpu|use_cuda|use_gpu|gpus?)"
    r"|use_cuda|cuda|cuda_flag|use_gpu|USE_CUDA|USE_GPU|on_gpu|is_cuda"
    r"|torch\.cuda\.is_available\(\)|[\w.]+\.is_cuda)$"
)


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


COMPS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def _stmt_text(node: cst.CSTNode) -> str:
    """The first line of a statement, without the comments and blank lines above it."""
    if hasattr(node, "leading_lines"):
        node = node.with_changes(leading_lines=[])
    return _code(node).strip().splitlines()[0][:160]


def _norm(text: str) -> str:
    return re.sub(r"[\s()\\]", "", text)


def is_device_expr(node: cst.BaseExpression) -> bool:
    text = _code(node).strip()
    if STR_DEVICE_RE.match(text):
        return True
    if isinstance(node, (cst.SimpleString, cst.FormattedString, cst.Integer, cst.Float)):
        return False
    return bool(DEVICE_RE.search(text))


def dotted(node: cst.BaseExpression) -> str | None:
    """`a.b.c` for a chain of names, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def value_root(node: cst.BaseExpression) -> str | None:
    """The variable a moved expression is made of: `x` for `x.squeeze(0)`, `self.G` for `self.G`,
    None for a fresh value (`torch.zeros(...)`, `Model(...)`, `self.f(...)`)."""
    while True:
        if isinstance(node, (cst.Name, cst.Attribute)):
            d = dotted(node)
            if d is None and isinstance(node, cst.Attribute):
                node = node.value
                continue
            if d is None or d.split(".")[0] in MODULE_ROOTS:
                return None
            return d
        if isinstance(node, cst.Subscript):
            node = node.value
            continue
        if isinstance(node, cst.Call):
            f = node.func
            if isinstance(f, cst.Attribute):
                base = dotted(f.value)
                if base is not None and (base.split(".")[0] in MODULE_ROOTS or base == "self"):
                    return None
                node = f.value
                continue
            return None
        return None


def _targets(stmt: cst.BaseSmallStatement) -> list[cst.BaseExpression]:
    if isinstance(stmt, cst.Assign):
        return [t.target for t in stmt.targets]
    if isinstance(stmt, (cst.AnnAssign, cst.AugAssign)):
        return [stmt.target]
    return []


class Stripper(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, follow_names: set[tuple[str, str]]):
        super().__init__()
        self.scope: list[str] = []
        self.stmts: list[cst.CSTNode] = []  # innermost statement (simple line or compound header)
        self.small: list[cst.BaseSmallStatement] = []
        self.guards: list[str] = []  # test codes of enclosing ifs
        self.follow_names = follow_names
        self.moves: list[dict] = []
        self.setup: list[dict] = []
        self.elifs: set[int] = set()
        self.moved_calls: set[int] = set()  # ids of original Call nodes that were removed whole
        self.comps: list[cst.CSTNode] = []  # enclosing comprehensions (original nodes)
        self.aliases: dict[tuple[str, str], set[str]] = {}  # (function, name) -> roots it was assigned from

    # ---------------------------------------------------------------- context
    def qualname(self) -> str:
        return ".".join(self.scope) or "<module>"

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            self.stmts.append(node)
        if isinstance(node, cst.BaseSmallStatement):
            self.small.append(node)
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            self.scope.append(node.name.value)
        if isinstance(node, cst.If):
            self.guards.append(_code(node.test).strip())
            if isinstance(node.orelse, cst.If):
                self.elifs.add(id(node.orelse))
        if isinstance(node, COMPS):
            self.comps.append(node)
        return super().on_visit(node)

    def on_leave(self, original, updated):
        result = super().on_leave(original, updated)
        if isinstance(original, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            self.stmts.pop()
        if isinstance(original, cst.BaseSmallStatement):
            self.small.pop()
        if isinstance(original, (cst.FunctionDef, cst.ClassDef)):
            self.scope.pop()
        if isinstance(original, cst.If):
            self.guards.pop()
        if isinstance(original, COMPS):
            self.comps.pop()
        return result

    def _stmt_span(self) -> tuple[int, int]:
        if isinstance(self.stmts[-1], cst.BaseCompoundStatement):
            # a header (or a one-line suite): the header's first line
            pos = self.get_metadata(PositionProvider, self.stmts[-1])
            return pos.start.line, pos.start.line
        pos = self.get_metadata(PositionProvider, self.stmts[-1])
        return pos.start.line, pos.end.line

    def _value_names(self, original_call: cst.Call, receiver: cst.BaseExpression | None) -> list[str]:
        names = []
        if receiver is not None:
            r = value_root(receiver)
            if r:
                names.append(r)
        if self.small:
            stmt = self.small[-1]
            value = getattr(stmt, "value", None)
            for tgt in _targets(stmt):
                if value is original_call or (self.comps and value is self.comps[0]):
                    d = dotted(tgt)
                    if d:
                        names.append(d)
                elif isinstance(value, cst.Tuple) and isinstance(tgt, (cst.Tuple, cst.List)):
                    for el, tel in zip(value.elements, tgt.elements):
                        if el.value is original_call:
                            d = dotted(tel.value)
                            if d:
                                names.append(d)
        return list(dict.fromkeys(names))

    def _follow(self, dev_text: str) -> bool:
        if any(re.search(r"\.is_cuda$", g) for g in self.guards):
            return True
        m = re.match(r"^([\w.]+)\.device$", dev_text)
        if m and m.group(1).split(".")[0] not in CONFIG_ROOTS and "args" not in m.group(1):
            return True
        return (self.qualname(), dev_text) in self.follow_names

    def _record(self, original: cst.Call, kind: str, what: str, dev: str, receiver) -> None:
        start, end = self._stmt_span()
        pos = self.get_metadata(PositionProvider, original)
        values = self._value_names(original, receiver)
        alias = sorted({r for v in values for r in self.aliases.get((self.qualname(), v), ())} - set(values))
        self.moves.append({
            "line": start,  # line of the (original) statement
            "end_line": end,
            "call_line": pos.start.line,
            "function": self.qualname(),
            "kind": kind,
            "what": what,
            "device": dev,
            "follow": self._follow(dev),
            "values": values,
            "aliases": alias,  # what the moved variables were assigned from in the function
            "multi": bool(self.comps),  # a move inside a comprehension moves every element
            "statement": _stmt_text(self.stmts[-1]),
        })

    # ---------------------------------------------------------------- moves
    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = updated.func
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda":
            if dotted(func.value) == "torch":  # torch.cuda(...) is not a method call on a value
                return updated
            dev = ", ".join(_code(a.value) for a in updated.args) or "cuda"
            self._record(original, "cuda", _code(func.value).strip(), dev, original.func.value)
            self.moved_calls.add(id(original))
            return func.value
        if isinstance(func, cst.Attribute) and func.attr.value == "to":
            args = list(updated.args)
            drop = None
            for i, a in enumerate(args):
                if a.keyword is not None and a.keyword.value == "device":
                    drop = i
                    break
            if drop is None and args and args[0].keyword is None and args[0].star == "" \
                    and is_device_expr(args[0].value):
                drop = 0
            if drop is None:
                return updated
            dev = _code(args[drop].value).strip()
            self._record(original, "to", _code(func.value).strip(), dev, original.func.value)
            rest = args[:drop] + args[drop + 1:]
            if all(a.keyword is not None and a.keyword.value in ("non_blocking", "copy") for a in rest):
                self.moved_calls.add(id(original))
                return func.value
            rest[-1] = rest[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return updated.with_changes(args=rest)
        # device= keyword of a factory
        name = func.attr.value if isinstance(func, cst.Attribute) else (
            func.value if isinstance(func, cst.Name) else None)
        if name in FACTORIES:
            args = list(updated.args)
            for i, a in enumerate(args):
                if a.keyword is not None and a.keyword.value == "device":
                    dev = _code(a.value).strip()
                    rest = args[:i] + args[i + 1:]
                    if rest:
                        rest[-1] = rest[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                    new = updated.with_changes(args=rest)
                    self._record(original, "device_kwarg", _code(new).strip(), dev, None)
                    return new
        return updated

    # ---------------------------------------------------------------- statements
    def leave_SimpleStatementLine(self, original, updated):
        keep = []
        for o, u in zip(original.body, updated.body):
            if isinstance(o, cst.Expr) and isinstance(o.value, cst.Call) and id(o.value) in self.moved_calls:
                continue  # `model.cuda()` / `model.to(device)` as a statement
            if isinstance(u, cst.Assign) and len(u.targets) == 1 and o is not u:
                if _norm(_code(u.targets[0].target)) == _norm(_code(u.value)):
                    continue  # `x = x.cuda()` -> `x = x`
            keep.append(u)
        if not keep:
            return cst.RemoveFromParent()
        if len(keep) != len(updated.body):
            keep[-1] = keep[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
            return updated.with_changes(body=keep)
        return updated

    def leave_SimpleStatementSuite(self, original, updated):
        keep = []
        for o, u in zip(original.body, updated.body):
            if isinstance(o, cst.Expr) and isinstance(o.value, cst.Call) and id(o.value) in self.moved_calls:
                continue
            if isinstance(u, cst.Assign) and len(u.targets) == 1 and o is not u:
                if _norm(_code(u.targets[0].target)) == _norm(_code(u.value)):
                    continue
            keep.append(u)
        if not keep:
            keep = [cst.Pass()]
        keep[-1] = keep[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(body=keep)

    def leave_IndentedBlock(self, original, updated):
        if not updated.body:
            return updated.with_changes(body=[cst.SimpleStatementLine(body=[cst.Pass()])])
        return updated

    def leave_If(self, original, updated):
        test = _code(updated.test).strip()
        if updated.orelse is not None or id(original) in self.elifs or not FLAG_RE.match(test):
            return updated
        body = updated.body
        stmts = body.body if isinstance(body, (cst.IndentedBlock, cst.SimpleStatementSuite)) else []
        rest = []
        for s in stmts:
            text = _code(s).strip()
            simple = not isinstance(s, cst.BaseCompoundStatement)
            if text == "pass" or (simple and "torch.cuda." in text):
                continue
            rest.append(text)
        if rest:
            return updated
        pos = self.get_metadata(PositionProvider, original)
        self.setup.append({"line": pos.start.line, "kind": "guard", "code": f"if {test}:",
                           "function": self.qualname()})
        return cst.RemoveFromParent()


def _prescan(module: cst.Module) -> tuple[set[tuple[str, str]], dict[tuple[str, str], set[str]]]:
    """(function, name) of local names bound to another tensor's device (`dv = 'cuda' if x.is_cuda
    else 'cpu'`, `device = idx.device`), and, per (function, name), the variables its assigned
    values were made of (`images, masks = batch['image'], batch['mask']` -> images: {batch})."""
    follow: set[tuple[str, str]] = set()
    aliases: dict[tuple[str, str], set[str]] = {}

    class V(cst.CSTVisitor):
        def __init__(self):
            self.scope = []

        def visit_FunctionDef(self, node):
            self.scope.append(node.name.value)

        def leave_FunctionDef(self, node):
            self.scope.pop()

        def visit_ClassDef(self, node):
            self.scope.append(node.name.value)

        def leave_ClassDef(self, node):
            self.scope.pop()

        def visit_Assign(self, node):
            fn = ".".join(self.scope) or "<module>"
            text = _code(node.value)
            if re.search(r"\.is_cuda\b|\b(?!self\b|args\b|opt\b)\w+\.device\b", text) and "torch.device(" not in text:
                for t in node.targets:
                    if isinstance(t.target, cst.Name):
                        follow.add((fn, t.target.value))
            for t in node.targets:
                tgt = t.target
                pairs = []
                if isinstance(tgt, (cst.Tuple, cst.List)) and isinstance(node.value, (cst.Tuple, cst.List)) \
                        and len(tgt.elements) == len(node.value.elements):
                    pairs = [(e.value, v.value) for e, v in zip(tgt.elements, node.value.elements)]
                elif isinstance(tgt, (cst.Tuple, cst.List)):
                    pairs = [(e.value, node.value) for e in tgt.elements]
                else:
                    pairs = [(tgt, node.value)]
                for te, ve in pairs:
                    d, r = dotted(te), value_root(ve)
                    if d and r and r != d:
                        aliases.setdefault((fn, d), set()).add(r)

    module.visit(V())
    return follow, aliases


def call_aliases(sources: dict[str, str]) -> dict[tuple[str, str, str], set[str]]:
    """(path, function, parameter) -> the variables that calls anywhere in the project pass for that
    parameter of a plain (module-level) function: `train.train(train_iter, dev_iter, cnn, args)` gives
    ('train.py', 'train', 'model') -> {'cnn'}. Calls are matched on the function's name only."""
    params: dict[str, list[tuple[str, list[str]]]] = {}
    calls: list[tuple[str, list, dict]] = []
    for path, code in sources.items():
        module = cst.parse_module(code)
        for stmt in module.body:
            if isinstance(stmt, cst.FunctionDef):
                names = [pp.name.value for pp in stmt.params.params]
                params.setdefault(stmt.name.value, []).append((path, names))

        class V(cst.CSTVisitor):
            def visit_Call(self, node):
                f = node.func
                name = f.attr.value if isinstance(f, cst.Attribute) else f.value if isinstance(f, cst.Name) else None
                if name:
                    pos = [a.value for a in node.args if a.keyword is None and not a.star]
                    kw = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
                    calls.append((name, pos, kw))

        module.visit(V())
    out: dict[tuple[str, str, str], set[str]] = {}
    for name, pos, kw in calls:
        for path, names in params.get(name, []):
            for i, pname in enumerate(names):
                arg = pos[i] if i < len(pos) else kw.get(pname)
                root = value_root(arg) if arg is not None else None
                if root and root != pname:
                    out.setdefault((path, name, pname), set()).add(root)
    return out


def strip_source(code: str) -> tuple[str, list[dict], list[dict]]:
    """(stripped code, moves, setup removed) for one file; setup assignments are not yet removed
    (that needs the other files: see remove_setup)."""
    module = cst.parse_module(code)
    wrapper = MetadataWrapper(module)
    follow, aliases = _prescan(module)
    s = Stripper(follow)
    s.aliases = aliases
    new = wrapper.visit(s)
    return new.code, s.moves, s.setup


def find_moves(code: str) -> list[dict]:
    """The move sites of `code`, by the same rules as the stripper."""
    return strip_source(code)[1]


SETUP_VALUE_RE = re.compile(r"torch\.device\(|cuda|is_available")


def _code_only(code: str) -> str:
    """The code with comments and the insides of string literals blanked (for counting references)."""
    import io
    import tokenize
    lines = [list(ln) for ln in code.splitlines(keepends=True)]
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type not in (tokenize.COMMENT, tokenize.STRING):
                continue
            (sr, sc), (er, ec) = tok.start, tok.end
            for r in range(sr, er + 1):
                row = lines[r - 1]
                a = sc if r == sr else 0
                b = ec if r == er else len(row)
                for i in range(a, b):
                    if row[i] != "\n":
                        row[i] = " "
    except (tokenize.TokenError, IndentationError):
        return code
    return "".join("".join(ln) for ln in lines)


def _ref_re(name: str) -> re.Pattern:
    if "." in name:
        return re.compile(r"(?<!\w)" + re.escape(name) + r"(?!\w)")
    return re.compile(r"(?<![\w.])" + re.escape(name) + r"(?!\w)")


def _setup_candidates(code: str) -> list[tuple[int, int, str]]:
    """(first line, last line, target) of one-target assignments that set up a device or flag."""
    module = cst.parse_module(code)
    wrapper = MetadataWrapper(module)
    out = []

    class V(cst.CSTVisitor):
        METADATA_DEPENDENCIES = (PositionProvider,)

        def visit_SimpleStatementLine(self, node):
            if len(node.body) != 1 or not isinstance(node.body[0], cst.Assign):
                return
            a = node.body[0]
            if len(a.targets) != 1:
                return
            t = dotted(a.targets[0].target)
            if not t or not SETUP_VALUE_RE.search(_code(a.value)):
                return
            if not re.search(r"device|cuda|gpu|dev$", t.split(".")[-1], re.I):
                return
            pos = self.get_metadata(PositionProvider, node)
            out.append((pos.start.line, pos.end.line, t))

    wrapper.visit(V())
    return out


def remove_setup(files: dict[str, str]) -> tuple[dict[str, str], list[dict]]:
    """Drop setup assignments whose target is used nowhere else; iterate to a fixpoint."""
    files = dict(files)
    removed = []
    while True:
        changed = False
        for path, code in files.items():
            cands = _setup_candidates(code)
            for line, end, target in cands:
                rx = _ref_re(target)
                if "." in target:
                    refs = sum(len(rx.findall(_code_only(c))) for c in files.values())
                    defs = sum(1 for c in files.values() for _, _, t in _setup_candidates(c) if t == target)
                else:
                    refs = len(rx.findall(_code_only(code)))
                    defs = sum(1 for _, _, t in cands if t == target)
                if refs > defs:
                    continue
                lines = code.splitlines(keepends=True)
                indent = re.match(r"\s*", lines[line - 1]).group(0)
                block = lines[line - 1:end]
                candidate = "".join(lines[:line - 1] + lines[end:])
                try:
                    compile(candidate, path, "exec")
                except SyntaxError:  # the statement was alone in its block
                    candidate = "".join(lines[:line - 1] + [indent + "pass\n"] + lines[end:])
                removed.append({"path": path, "line": line, "kind": "setup", "code": "".join(block).strip(),
                                "target": target})
                files[path] = candidate
                changed = True
                break
            if changed:
                break
        if not changed:
            return files, removed


def strip_files(sources: dict[str, str]) -> tuple[dict[str, str], list[dict], list[dict]]:
    """Strip a project: {path: code} -> ({path: cpu code}, moves, setup). Lines are the original's,
    except the `setup` lines of kind 'setup', which are lines of the file after the moves went."""
    out, moves, setup = {}, [], []
    for path, code in sources.items():
        new, m, s = strip_source(code)
        out[path] = new
        moves += [{"path": path, **x} for x in m]
        setup += [{"path": path, **x} for x in s]
    out, removed = remove_setup(out)
    # report the setup lines in original coordinates: find the statement text in the original
    for r in removed:
        orig = sources[r["path"]].splitlines()
        first = r["code"].splitlines()[0].strip()
        hits = [i + 1 for i, ln in enumerate(orig) if ln.strip() == first]
        r["line"] = hits[0] if hits else None
    setup += removed
    for path, code in out.items():
        compile(code, path, "exec")  # the CPU version must still be Python
    return out, moves, setup


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--report", help="write the removed moves and setup as JSON here")
    a = ap.parse_args(argv)
    src, dst = Path(a.src), Path(a.dst)
    sources = {f: (src / f).read_text(encoding="utf-8") for f in a.files}
    out, moves, setup = strip_files(sources)
    for f, code in out.items():
        (dst / f).parent.mkdir(parents=True, exist_ok=True)
        (dst / f).write_text(code, encoding="utf-8")
    report = {"moves": moves, "setup": setup}
    if a.report:
        Path(a.report).write_text(json.dumps(report, indent=1))
    else:
        json.dump(report, sys.stdout, indent=1)
    print(f"{len(moves)} moves, {len(setup)} setup removed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
