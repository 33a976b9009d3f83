"""A rule's runtime side: how a run shows the mistake the rule finds, the cause the diagnosis gives
for it, and the edit ``migrate`` makes for it, or why there is none.

Each rule declares one, where the rule is (``Rule.runtime``), as plain data: the runtime reads it (the
diagnosis of a failing run, cpu2gpu.runtime.causes; migrate's rounds, cpu2gpu.runtime.judge.migrate)
and so does the repair (cpu2gpu.migration.repair), while the static half imports no torch for it.
tests/test_rule_runtime_side.py checks that a rule with a fix says how a run repairs it or why none
does, and that every cause the diagnosis gives is one a rule declares, in the words declared here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# The words of a device mismatch: a CPU tensor met a device tensor. Which tensor, and so which rule,
# the failing frames tell (the values on the failing lines).
DEVICE_MISMATCH = (
    "Expected all tensors to be on the same device",
    "should be the same or input should be a MKLDNN tensor",
    "and weight type (torch.",
    "indices should be either on cpu or on the same device",
    "Input and parameter tensors are not at the same device",
    "but got cpu",  # autograd: "invalid gradient at index 0 - expected device cuda:0 but got cpu"
)

# The edits migrate makes for a located cause (RuntimeRepair.edit).
BINDING = "binding"  # cpu2gpu.migration.repair.repair: the move where the located value is bound
RULE_FIX = "rule-fix"  # cpu2gpu.migration.repair.rule_fix: the rule's own fix, unsafe ones too, in the file named

# Where migrate takes the value from when the diagnosis located none (RuntimeRepair.located).
CPU_MODULE = "cpu-module"  # the module the run called most on the CPU, where the script holds it
TRAINED_TENSORS = "trained-tensors"  # no module in the run: the tensors the optimizer trains, made on the CPU

# What the file needs before the rule's fix can read it (RuntimeRepair.prepare).
REGISTERED_NAMES = "registered-names"  # a list made of the buffers' locals, written with their attributes


@dataclass(frozen=True)
class Symptom:
    """One way a failing run shows the rule's mistake, and the cause the diagnosis gives then."""

    case: str  # the name the diagnosis picks it by (one rule's cases differ)
    shown_by: str  # what tells it, in words: the exception, and what the failing frames hold
    says: str  # the cause, a str.format template over the fields the diagnosis fills in ("at": file:line)
    markers: tuple[str, ...] = ()  # words of the exception's message, any one of which shows it
    pattern: str = ""  # a regular expression the message matches too, where the words alone do not tell
    raised: str = ""  # the exception's class (module.name), where the words alone do not tell


@dataclass(frozen=True)
class RuntimeRepair:
    """The edit migrate makes for a cause the device run located."""

    edit: str  # BINDING or RULE_FIX
    located: str = ""  # BINDING: where the value is taken from when the diagnosis located none
    prepare: str = ""  # RULE_FIX: what the file needs first


@dataclass(frozen=True)
class RuntimeSide:
    """How a run shows a rule's mistake, and what migrate does about it.

    ``symptoms``: how the failing runs show it; ``records``: the runs that end well but whose records
    show it (verify's judgement of them, in words); ``unseen``: why no run shows it, where neither does.
    ``repair``: the edit migrate makes, or ``unrepaired``: why it makes none (round 0's static rewrite
    still applies the rule's fix)."""

    symptoms: tuple[Symptom, ...] = ()
    records: tuple[str, ...] = ()
    unseen: str = ""
    repair: Optional[RuntimeRepair] = None
    unrepaired: str = ""

    def symptom(self, case: str) -> Symptom:
        """The symptom named ``case`` (KeyError when the rule declares none of that name)."""
        for symptom in self.symptoms:
            if symptom.case == case:
                return symptom
        raise KeyError(case)
