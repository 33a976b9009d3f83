"""What a rule is: a code, a name, a message, examples, and a query over Facts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar, Iterator, Optional, Union, cast

import libcst as cst

from ..analysis.facts import Facts, Place, Scope
from ..rewrite.fixes import DeviceSetup, Fix, add_keyword, chain_to, method_call
from ..analysis.syntaxindex import SyntaxIndex, syntax_index
from .runtimeside import RuntimeSide


@dataclass(frozen=True)
class Invalid:
    """Source that the rule must flag; ``fixed`` is what ``rewrite`` must turn it into."""

    code: str
    fixed: Optional[str] = None
    fixable: bool = True  # False where the finding has no fix (the rule has one elsewhere)


@dataclass(eq=False)
class Hit:
    """A finding before positions: the node it points at, and its fix."""

    code: str
    name: str
    message: str
    node: cst.CSTNode
    fix: Optional[Fix] = None


class RuleContext:
    """What rules share for one file: the facts, the device to move things to, and for the rules that
    read the code itself the file's syntax index (``syntax``: one walk, made when first asked for).
    ``text``: the file's source where it is at hand (for the index's pre-filters)."""

    def __init__(self, facts: Facts, setup: DeviceSetup, text: Optional[str] = None) -> None:
        self.facts = facts
        self.setup = setup
        self.text = text
        self._syntax: Optional[SyntaxIndex] = None

    @property
    def syntax(self) -> SyntaxIndex:
        if self._syntax is None:
            self._syntax = syntax_index(self.facts.module, self.text)
        return self._syntax

    def device_for(self, scope: Optional[Scope] = None, time: Optional[int] = None) -> tuple[str, bool]:
        """The device name to use at a site, and whether the setup must be added for it.

        ``scope`` and ``time`` say where the site is: a device variable bound further
        down the module than the site is hoisted above it (if it depends on torch
        alone), else the site gets a device of its own.
        """
        reach = scope if scope is not None and hasattr(scope, "device_binding") else self.facts.global_scope
        binding = reach.device_binding() if reach is not None else None
        if binding is None:
            module = reach.module_parameter() if reach is not None and self.facts.has_local_device else None
            if module is not None:
                # The script keeps its device elsewhere (main()): follow the model this function gets.
                return f"next({module}.parameters()).device", False
            return self.setup.name, True
        name, bound_at, stmt, module_level = binding
        if time is None or not module_level or bound_at <= time:
            return name, False
        if stmt is not None and self.setup.can_hoist(stmt, name):
            # bound at module level: the statement is one of the module's own (the walk's top statement)
            self.setup.hoist = cast(Union[cst.SimpleStatementLine, cst.BaseCompoundStatement], stmt)
            return name, True
        return self.setup.name, True


# -- what a Replace puts in place of its node ---------------------------------------------
#
# A build is given its node as the edits inside it left it: an expression is still an expression,
# a call still a call (inner edits replace its parts, not it). The casts below say so and check
# nothing, as the builds checked nothing before. The factories bind their arguments when the fix
# is made, as the lambdas' default arguments did (a loop's next round cannot change them).

Build = Callable[[cst.CSTNode], cst.CSTNode]


def as_expression(node: cst.CSTNode) -> cst.BaseExpression:
    """The node a build is given, where the fix replaces an expression."""
    return cast(cst.BaseExpression, node)


def as_call(node: cst.CSTNode) -> cst.Call:
    """The node a build is given, where the fix replaces a call."""
    return cast(cst.Call, node)


def _expression(code: Union[str, cst.BaseExpression]) -> cst.BaseExpression:
    return cst.parse_expression(code) if isinstance(code, str) else code


def moved_to(device: str) -> Build:
    """``expr.to(device)`` (``chain_to``: the parentheses around ``expr`` stay outside)."""
    return lambda node: chain_to(as_expression(node), device)


def method_called(method: str, *args: Union[str, cst.BaseExpression]) -> Build:
    """``expr.method(*args)``; an argument given as code is parsed when the fix is applied."""
    return lambda node: method_call(as_expression(node), method, *(_expression(a) for a in args))


def keyword_added(name: str, value: Union[str, cst.BaseExpression]) -> Build:
    """``call(..., name=value)``; a value given as code is parsed when the fix is applied."""
    return lambda node: add_keyword(as_call(node), name, _expression(value))


def parsed(code: str) -> Build:
    """The expression ``code``, in place of the node."""
    return lambda _node: cst.parse_expression(code)


def follows_input(facts: Facts, value) -> bool:
    """A tensor made in a plain function whose input tensor is on the device: it takes that device."""
    return value.context == "function" and value.input_value is not None \
        and facts.place(value.input_value) is Place.DEVICE


def draws_with_generator(node: cst.CSTNode) -> bool:
    """``torch.randn(..., generator=g)``: a CPU generator cannot draw on the device (CG113), so
    such a draw is moved after it is made rather than given ``device=``."""
    return isinstance(node, cst.Call) and any(a.keyword is not None and a.keyword.value == "generator" for a in node.args)


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    message: ClassVar[str]
    # "safe": applied by rewrite; "unsafe": only with --unsafe-fixes; None: no fix.
    fix_safety: ClassVar[Optional[str]] = "safe"
    # Hints that are off unless selected (noisy in a hook, no fix).
    default_enabled: ClassVar[bool] = True
    # Performance rules (CG3xx) leave a script that already places itself on the device alone,
    # unless the user asked for them by a code or prefix that names them (CG3, CG301).
    only_for_cpu_scripts_unless_selected: ClassVar[bool] = False
    # How a run shows the mistake, and the edit migrate makes for it or why none (runtimeside.py): every rule says.
    runtime: ClassVar[RuntimeSide]
    selected_explicitly: bool = False
    VALID: ClassVar[list[str]] = []
    INVALID: ClassVar[list[Invalid]] = []

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        raise NotImplementedError

    def hit(self, node: cst.CSTNode, fix: Optional[Fix] = None, message: Optional[str] = None) -> Hit:
        if fix is not None:
            fix.safe = self.fix_safety == "safe"
        return Hit(self.code, self.name, message or self.message, node, fix)

    @classmethod
    def summary(cls) -> str:
        doc = (cls.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else cls.message
