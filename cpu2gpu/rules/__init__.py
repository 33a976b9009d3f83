"""The rule catalog: one module per rule, registered here in code order."""

from __future__ import annotations

from .base import Hit, Invalid, Rule, RuleContext
from .cg101_model_not_moved import ModelNotMoved
from .cg102_tensor_not_moved import TensorNotMoved
from .cg103_batch_not_moved import BatchNotMoved
from .cg107_numpy_on_device import NumpyOnDevice
from .cg108_device_mismatch_after_move import DeviceMismatchAfterMove
from .cg201_hardcoded_cuda import HardcodedCuda
from .cg202_load_without_map_location import LoadWithoutMapLocation

ALL_RULES: list[type[Rule]] = [
    ModelNotMoved,
    TensorNotMoved,
    BatchNotMoved,
    NumpyOnDevice,
    DeviceMismatchAfterMove,
    HardcodedCuda,
    LoadWithoutMapLocation,
]

RULES_BY_CODE = {rule.code: rule for rule in ALL_RULES}

__all__ = ["ALL_RULES", "RULES_BY_CODE", "Hit", "Invalid", "Rule", "RuleContext"]
