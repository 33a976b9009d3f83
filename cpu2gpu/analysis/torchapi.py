"""What the analysis knows about the torch API, by qualified name.

Kept as plain data so that the rules and the walker share one vocabulary.
"""

from __future__ import annotations

# Functions that build a tensor from scratch and take ``device=``.
FACTORIES = frozenset(
    "torch." + name
    for name in (
        "tensor as_tensor zeros ones empty full rand randn randint randperm "
        "arange range linspace logspace eye normal scalar_tensor empty_strided "
        "tril_indices triu_indices complex polar bernoulli_ sparse_coo_tensor"
    ).split()
)

# Functions that wrap non-tensor data and have no ``device=``: fixed with ``.to(device)``.
CONVERSIONS = frozenset({"torch.from_numpy", "torch.frombuffer", "torch.Tensor", "torch.FloatTensor",
                         "torch.LongTensor", "torch.IntTensor", "torch.DoubleTensor", "torch.BoolTensor"})

# Factories with an overload that takes tensors and no ``device=`` (the result is where they are).
TENSOR_ARGUMENT_FACTORIES = frozenset({"torch.normal", "torch.complex", "torch.polar"})

# The legacy CPU tensor types: ``t.type(torch.FloatTensor)`` copies ``t`` to the CPU. The dtype method
# that keeps the device instead.
CPU_TENSOR_TYPES = {
    "torch.FloatTensor": "float", "torch.DoubleTensor": "double", "torch.HalfTensor": "half",
    "torch.LongTensor": "long", "torch.IntTensor": "int", "torch.ShortTensor": "short",
    "torch.ByteTensor": "byte", "torch.CharTensor": "char", "torch.BoolTensor": "bool",
    "torch.BFloat16Tensor": "bfloat16",
}

# Their CUDA twins: ``t.type(torch.cuda.FloatTensor)`` is a move to the GPU (as ``.cuda()`` is).
CUDA_TENSOR_TYPES = frozenset("torch.cuda." + qual[len("torch."):] for qual in CPU_TENSOR_TYPES)

# Reductions whose result is a 0-dim tensor when they are given no dimension (``x.sum()``,
# ``torch.sum(x)``): a 0-dim CPU tensor joins device tensors in any op, so such a value's copy to
# the CPU breaks nothing.
FULL_REDUCTIONS = frozenset(
    "sum mean max min prod norm all any std var median nansum nanmean amax amin argmax argmin "
    "count_nonzero".split()
)

# ``*_like`` factories inherit the device of their first argument.
LIKE_FACTORIES = frozenset(
    "torch." + name
    for name in "zeros_like ones_like empty_like full_like rand_like randn_like randint_like".split()
)

# Tensor methods whose result is not a tensor (or is the same Python value kind).
NON_TENSOR_METHODS = frozenset(
    "item tolist size dim numel nelement element_size stride data_ptr backward is_contiguous "
    "register_hook storage_offset get_device __len__ is_floating_point equal".split()
)

# Tensor attributes that are tensors themselves.
TENSOR_ATTRIBUTES = frozenset({"T", "mT", "H", "mH", "data", "grad", "real", "imag"})

# Module methods that return the module itself.
MODULE_SELF_METHODS = frozenset(
    "train eval float half double bfloat16 requires_grad_ share_memory zero_grad apply".split()
)

# torch.nn containers: their attributes and items are their layers (self.transformer.wpe(pos)).
CONTAINER_MODULES = frozenset(
    prefix + name for prefix in ("torch.nn.", "torch.nn.modules.container.")
    for name in ("ModuleDict", "ModuleList", "Sequential"))

# What a container has besides its layers: nn.Module's and the containers' own methods.
MODULE_METHODS = frozenset(
    "parameters named_parameters buffers named_buffers children named_children modules named_modules "
    "items keys values state_dict load_state_dict to cuda cpu train eval apply zero_grad requires_grad_ "
    "register_buffer register_parameter register_module register_forward_hook register_forward_pre_hook "
    "register_full_backward_hook add_module append extend insert update pop get_submodule get_parameter "
    "forward float double half bfloat16 type share_memory extra_repr training".split())

# Methods that add layers to a built container (nn.Sequential(), nn.ModuleList(), nn.ModuleDict()).
MODULE_STRUCTURE_METHODS = frozenset("add_module register_module append extend insert update".split())

# Libraries whose functions read a tensor on the host (through __array__): a device tensor raises there.
HOST_LIBRARIES = ("numpy.", "matplotlib.", "seaborn.", "sklearn.metrics.", "scipy.")

# Methods that place a value: handled as moves.
MOVE_METHODS = frozenset({"to", "cuda", "cpu"})

DTYPE_NAMES = frozenset(
    "float float16 float32 float64 half double bfloat16 int int8 int16 int32 int64 long short "
    "uint8 bool complex64 complex128 cfloat cdouble".split()
)

# torch.nn classes that hold no parameters or buffers: moving them changes nothing,
# and calling them is a plain tensor operation.
_STATELESS_NN = (
    "ReLU ReLU6 LeakyReLU PReLU_ ELU SELU CELU GELU SiLU Mish Sigmoid Tanh Hardtanh Hardswish "
    "Hardsigmoid Softplus Softsign Softshrink Hardshrink Tanhshrink LogSigmoid Threshold GLU "
    "Softmax Softmin LogSoftmax Softmax2d Dropout Dropout1d Dropout2d Dropout3d AlphaDropout "
    "FeatureAlphaDropout Flatten Unflatten Identity MaxPool1d MaxPool2d MaxPool3d AvgPool1d "
    "AvgPool2d AvgPool3d AdaptiveAvgPool1d AdaptiveAvgPool2d AdaptiveAvgPool3d AdaptiveMaxPool1d "
    "AdaptiveMaxPool2d AdaptiveMaxPool3d LPPool1d LPPool2d FractionalMaxPool2d Upsample "
    "UpsamplingNearest2d UpsamplingBilinear2d PixelShuffle PixelUnshuffle ChannelShuffle "
    "ZeroPad1d ZeroPad2d ZeroPad3d ConstantPad1d ConstantPad2d ConstantPad3d ReflectionPad1d "
    "ReflectionPad2d ReflectionPad3d ReplicationPad1d ReplicationPad2d ReplicationPad3d "
    "CosineSimilarity PairwiseDistance Fold Unfold"
).split()
STATELESS_MODULES = frozenset("torch.nn." + n for n in _STATELESS_NN)

# Losses: stateless unless built with tensor arguments (weight=, pos_weight=).
LOSS_SUFFIX = "Loss"

# Wrappers that return (a view of) the module they are given.
MODULE_WRAPPERS = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
    "torch.nn.parallel.DistributedDataParallel", "torch.compile", "torch.jit.script",
})

# Base classes that make a class defined in the file a module.
MODULE_BASES = frozenset({
    "torch.nn.Module", "pytorch_lightning.LightningModule", "lightning.LightningModule",
    "lightning.pytorch.LightningModule",
})

# Factories from model zoos that return modules.
MODULE_FACTORY_PREFIXES = ("torchvision.models.", "timm.create_model", "torch.hub.load")

TENSOR_DATASETS = frozenset({"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"})

# torchvision data sets whose data and labels are tensors (CIFAR's are a NumPy array and a list).
MNIST_STYLE_DATASETS = frozenset(
    "torchvision.datasets." + name for name in "MNIST FashionMNIST KMNIST EMNIST QMNIST".split())
MNIST_TENSOR_ATTRIBUTES = frozenset(
    "data targets train_data test_data train_labels test_labels".split())

DATALOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})

OPTIMIZER_PREFIX = "torch.optim."

LOAD_FUNCTIONS = frozenset({"torch.load"})

PARAMETER_CLASSES = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})

# The pre-0.4 autograd wrapper: ``Variable(x)`` is ``x`` (a tensor since PyTorch 0.4).
VARIABLE_WRAPPERS = frozenset({"torch.autograd.Variable", "torch.autograd.variable.Variable"})


_NOT_MODELS = ("Tokenizer", "Processor", "FeatureExtractor", "Config", "Vocab")


def is_module_class(qualname: str) -> bool:
    """A torch.nn class (layer, container, loss) or a model-zoo factory."""
    if qualname in MODULE_WRAPPERS:
        return False
    if qualname.startswith("torch.nn.") and not qualname.startswith(("torch.nn.functional.", "torch.nn.init.", "torch.nn.utils.")):
        last = qualname.rsplit(".", 1)[1]
        if last == "from_pretrained":  # nn.Embedding.from_pretrained(weights): a layer, made by its classmethod
            last = qualname.rsplit(".", 2)[1]
        return last[:1].isupper() and last != "Parameter"
    if qualname.endswith(".from_pretrained"):
        # AutoModel.from_pretrained is a model; a tokenizer, processor or config is not
        owner = qualname.rsplit(".", 2)[-2]
        return not any(word in owner for word in _NOT_MODELS)
    return qualname.startswith(MODULE_FACTORY_PREFIXES)


def is_stateless_module(qualname: str) -> bool:
    # (NLLLoss2d, the old 2-d spelling, is a loss too)
    return qualname in STATELESS_MODULES or (qualname.startswith("torch.nn.") and LOSS_SUFFIX in qualname.rsplit(".", 1)[-1])


def is_optimizer(qualname: str) -> bool:
    if not qualname.startswith(OPTIMIZER_PREFIX) or ".lr_scheduler" in qualname or ".swa_utils" in qualname:
        return False
    return qualname.rsplit(".", 1)[1][:1].isupper()


def is_dtype(qualname: str) -> bool:
    return qualname.startswith("torch.") and qualname.count(".") == 1 and qualname[6:] in DTYPE_NAMES


def is_tensor_function(qualname: str) -> bool:
    """torch.* / torch.nn.functional.* functions that compute on tensors."""
    if qualname.startswith("torch.nn.functional."):
        return True
    if not qualname.startswith("torch.") or qualname.count(".") != 1:
        return False
    name = qualname[6:]
    return name[:1].islower() and name not in {"device", "load", "save", "manual_seed", "no_grad",
                                               "set_grad_enabled", "is_tensor", "numel", "compile",
                                               "set_num_threads", "get_num_threads", "seed",
                                               "inference_mode", "enable_grad", "set_default_dtype",
                                               "use_deterministic_algorithms", "autocast"}

# torch.cuda calls that fail (or silently do nothing) without a GPU.
CUDA_ONLY_CALLS = frozenset(
    "synchronize set_device current_device get_device_name get_device_properties get_device_capability "
    "memory_allocated max_memory_allocated memory_reserved max_memory_reserved reset_peak_memory_stats "
    "memory_summary manual_seed manual_seed_all Event Stream current_stream".split()
)
