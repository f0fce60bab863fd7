"""torch's module paths that real code imports names from, answered where retrograd keeps
those names: ``from torch.optim.adam import Adam``, ``from torch.distributions.normal import
Normal``, ``import torch.backends.cudnn as cudnn``, ``from torch.nn.utils.clip_grad import
clip_grad_norm_`` port unchanged.

torch spreads a family over one file per member (``torch.optim.adam``, ``torch.optim.sgd``...);
retrograd keeps a family in one module. Each path of :data:`PATHS` is a module of torch's name
whose attributes are read from its target, so that the names it gives are the very objects of
the target (``isinstance``, pickling and the target's later changes agree). A target that is a
namespace of flags (``backends.cudnn``) is registered itself, so that ``cudnn.benchmark = True``
sets the flag every reader sees. Paths with names of their own are real files instead
(``nn/modules/utils.py``, ``autograd/function.py``, ``utils/hooks.py``,
``nn/utils/spectral_norm.py``, ``nn/utils/weight_norm.py``...).

>>> from retrograd.optim.adam import Adam
>>> import retrograd as rg
>>> Adam is rg.optim.Adam
True
>>> import retrograd.backends.cudnn as cudnn
>>> cudnn is rg.backends.cudnn
True
"""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["PATHS", "install"]


def _each(package: str, *modules: str) -> dict[str, str]:
    """``package.module`` -> ``package`` for each of ``modules`` (torch's one file a name)."""
    return {f"{package}.{module}": package for module in modules}


#: torch's module path (below ``torch``) -> where retrograd keeps its names (below
#: ``retrograd``: a module, or an attribute path to a namespace object)
PATHS: dict[str, str] = {
    **_each(
        "optim",
        "adadelta", "adagrad", "adam", "adamax", "adamw", "asgd", "nadam", "radam", "rmsprop",
        "rprop", "sgd", "sparse_adam",
    ),
    **_each(
        "distributions",
        "beta", "binomial", "cauchy", "chi2", "dirichlet", "exponential", "fishersnedecor",
        "generalized_pareto", "geometric", "gumbel", "half_cauchy", "half_normal", "independent",
        "inverse_gamma", "kumaraswamy", "laplace", "log_normal", "logistic_normal",
        "mixture_same_family", "multinomial", "negative_binomial", "one_hot_categorical",
        "pareto", "poisson", "relaxed_bernoulli", "relaxed_categorical", "studentT",
        "transformed_distribution", "uniform", "weibull",
    ),
    "nn.modules.flatten": "nn",
    "nn.modules.upsampling": "nn",
    "nn.utils.clip_grad": "nn.utils",
    "amp.autocast_mode": "amp",
    "amp.grad_scaler": "amp",
    "autograd.grad_mode": "autograd",
    "autograd.gradcheck": "autograd",
    "autograd.variable": "autograd",
    "cuda.random": "cuda",
    "cuda.memory": "cuda",
    "random": "random",
    "utils.flop_counter": "counting",
    "utils.module_tracker": "counting",
    "_dynamo.eval_frame": "_dynamo",  # OptimizedModule, what torch.compile(module) returns
    "onnx.operators": "onnx_operators",  # torch.onnx.operators (retrograd's onnx is a module)
    "_dynamo.config": "_dynamo.config",  # the compilers' settings (namespaces, not modules)
    "_inductor.config": "_inductor.config",
    **{f"backends.{flags}": f"backends.{flags}" for flags in (
        "cudnn", "cuda", "mkldnn", "mps", "openmp", "opt_einsum", "cpu", "mkl", "mha",
        "quantized",
    )},
}  # fmt: skip


def _resolve(root: Any, dotted: str) -> Any:
    target = root
    for part in dotted.split("."):
        target = getattr(target, part)
    return target


def _forwarding(name: str, target: types.ModuleType) -> types.ModuleType:
    """A module named ``name`` whose attributes are ``target``'s (PEP 562's ``__getattr__``)."""
    module = types.ModuleType(name, f"torch's path to names of :mod:`{target.__name__}`.")
    module.__getattr__ = lambda attribute: getattr(target, attribute)  # type: ignore[method-assign]
    module.__dir__ = lambda: dir(target)  # type: ignore[method-assign]
    if hasattr(target, "__all__"):
        module.__all__ = list(target.__all__)
    return module


def install(root: types.ModuleType) -> None:
    """Register every path of :data:`PATHS` below ``root`` (the ``retrograd`` package): in
    ``sys.modules``, so that ``import`` and ``from ... import`` find it, and as an attribute
    of its parent, as an imported submodule is (``rg.optim.adam.Adam``)."""
    for path, where in PATHS.items():
        target = _resolve(root, where)
        name = f"{root.__name__}.{path}"
        if isinstance(target, types.ModuleType):
            target = _forwarding(name, target)
        sys.modules[name] = target
        parent, _, leaf = path.rpartition(".")
        parent_module = _resolve(root, parent) if parent else root
        if not hasattr(parent_module, leaf):
            setattr(parent_module, leaf, target)
