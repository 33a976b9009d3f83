"""The rule catalog: one module per rule, registered here in code order."""

from __future__ import annotations

from .base import Hit, Invalid, Rule, RuleContext
from .cg101_model_not_moved import ModelNotMoved
from .cg102_tensor_not_moved import TensorNotMoved
from .cg103_batch_not_moved import BatchNotMoved
from .cg104_factory_in_forward import FactoryInForward
from .cg105_plain_tensor_attribute import PlainTensorAttribute
from .cg106_loss_weight_not_moved import LossWeightNotMoved
from .cg107_numpy_on_device import NumpyOnDevice
from .cg108_device_mismatch_after_move import DeviceMismatchAfterMove
from .cg109_module_in_plain_container import ModuleInPlainContainer
from .cg110_to_result_discarded import ToResultDiscarded
from .cg111_module_created_in_forward import ModuleCreatedInForward
from .cg112_parameter_moved_at_creation import ParameterMovedAtCreation
from .cg113_cpu_generator_for_device_draw import CpuGeneratorForDeviceDraw
from .cg114_stale_alias_of_buffers import StaleAliasOfBuffers
from .cg115_cpu_tensor_type_cast import CpuTensorTypeCast
from .cg116_float64_on_device import Float64OnDevice
from .cg117_cuda_in_loader_worker import CudaInLoaderWorker
from .cg201_hardcoded_cuda import HardcodedCuda
from .cg202_load_without_map_location import LoadWithoutMapLocation
from .cg203_optimizer_before_move import OptimizerBeforeMove
from .cg204_unguarded_cuda_call import UnguardedCudaCall
from .cg205_hardcoded_cpu_device import HardcodedCpuDevice
from .cg206_cuda_call_in_accelerator_script import CudaCallInAcceleratorScript
from .cg301_loader_without_pin_memory import LoaderWithoutPinMemory
from .cg302_create_then_move import CreateThenMove
from .cg303_sync_in_loop import SyncInLoop
from .cg400_not_distributed import NotDistributed
from .cg401_sampler_without_set_epoch import SamplerWithoutSetEpoch
from .cg402_save_on_every_rank import SaveOnEveryRank
from .cg403_wrapper_state_dict import WrapperStateDict
from .cg404_sampler_with_shuffle import SamplerWithShuffle
from .cg405_load_without_rank_map_location import LoadWithoutRankMapLocation
from .runtimeside import RuntimeRepair

ALL_RULES: list[type[Rule]] = [
    ModelNotMoved,
    TensorNotMoved,
    BatchNotMoved,
    FactoryInForward,
    PlainTensorAttribute,
    LossWeightNotMoved,
    NumpyOnDevice,
    DeviceMismatchAfterMove,
    ModuleInPlainContainer,
    ToResultDiscarded,
    ModuleCreatedInForward,
    ParameterMovedAtCreation,
    CpuGeneratorForDeviceDraw,
    StaleAliasOfBuffers,
    CpuTensorTypeCast,
    Float64OnDevice,
    CudaInLoaderWorker,
    HardcodedCuda,
    LoadWithoutMapLocation,
    OptimizerBeforeMove,
    UnguardedCudaCall,
    HardcodedCpuDevice,
    CudaCallInAcceleratorScript,
    LoaderWithoutPinMemory,
    CreateThenMove,
    SyncInLoop,
    NotDistributed,
    SamplerWithoutSetEpoch,
    SaveOnEveryRank,
    WrapperStateDict,
    SamplerWithShuffle,
    LoadWithoutRankMapLocation,
]

RULES_BY_CODE = {rule.code: rule for rule in ALL_RULES}

# The codes whose cause, once a run located it, migrate repairs, and the edit it makes (each rule's runtime side).
RUNTIME_REPAIRS: dict[str, RuntimeRepair] = {
    rule.code: rule.runtime.repair for rule in ALL_RULES if rule.runtime.repair is not None}

__all__ = ["ALL_RULES", "RULES_BY_CODE", "RUNTIME_REPAIRS", "Hit", "Invalid", "Rule", "RuleContext"]
