"""torch's ``torch.nn.utils.weight_norm`` module: the ``WeightNorm`` forward pre-hook class,
which programs apply directly (wyharveychen/CloserLookFewShot's ``distLinear`` calls
``WeightNorm.apply(self.L, 'weight', dim=0)``), with the module's ``weight_norm`` and
``remove_weight_norm`` functions (:mod:`.norm_hooks`'; the package's names are these
functions, as torch's are).

The hook keeps torch's layout: parameters ``<name>_g`` (the norms over every dimension but
``dim``) and ``<name>_v``, and ``<name>`` recomputed as ``g * v / ||v||`` before each forward.
"""

from __future__ import annotations

import warnings
from typing import Any

from ...errors import InvalidArgumentError
from ..parameter import Parameter
from . import norm_hooks
from .norm_hooks import (
    check_hook_free,
    install_hook,
    norm_except_dim,
    remove_weight_norm,
    weight_norm_value,
)

__all__ = ["WeightNorm", "remove_weight_norm", "weight_norm"]

_DEPRECATED = (
    "`torch.nn.utils.weight_norm` is deprecated in favor of "
    "`torch.nn.utils.parametrizations.weight_norm`."
)


def weight_norm(module: Any, name: str = "weight", dim: int | None = 0) -> Any:
    """torch's deprecated ``nn.utils.weight_norm``: ``module.<name>`` reparametrized as ``g *
    v / ||v||`` (:func:`.norm_hooks.weight_norm`), with the ``FutureWarning`` torch gives at
    every call (from its ``WeightNorm.apply``). Returns ``module``."""
    warnings.warn(_DEPRECATED, FutureWarning, stacklevel=2)
    return norm_hooks.weight_norm(module, name, dim)


class WeightNorm:
    """torch's weight normalization hook: ``module.<name>`` is ``<name>_g * <name>_v /
    ||<name>_v||``, the norm over every dimension but ``dim`` (``None`` or ``-1``: one norm)."""

    def __init__(self, name: str, dim: int | None) -> None:
        self.name = name
        self.dim = -1 if dim is None else dim

    def compute_weight(self, module: Any) -> Any:
        g = getattr(module, self.name + "_g")
        v = getattr(module, self.name + "_v")
        return weight_norm_value(v, g, self.dim)

    @staticmethod
    def apply(module: Any, name: str, dim: int | None) -> WeightNorm:
        warnings.warn(_DEPRECATED, FutureWarning, stacklevel=2)
        check_hook_free(module, name, "weight_norm")
        fn = WeightNorm(name, dim)
        weight = module._parameters.get(name)
        if weight is None:
            raise InvalidArgumentError(
                f"WeightNorm: {type(module).__name__} has no parameter {name!r} (parameters: "
                f"{[n for n, p in module._parameters.items() if p is not None]})"
            )
        del module._parameters[name]
        module.register_parameter(name + "_g", Parameter(norm_except_dim(weight, 2, fn.dim).data))
        module.register_parameter(name + "_v", Parameter(weight.data))
        fn.recompute(module)
        # the hook is this object (programs look for ``isinstance(hook, WeightNorm)`` among
        # ``module._forward_pre_hooks``), registered where ``remove_weight_norm`` finds it
        install_hook(module, name, "weight_norm", fn.recompute, hook=fn)
        return fn

    def recompute(self, module: Any) -> None:
        setattr(module, self.name, self.compute_weight(module))

    def remove(self, module: Any) -> None:
        """Fold ``g * v / ||v||`` back into one parameter ``<name>`` and drop the hook."""
        remove_weight_norm(module, self.name)

    def __call__(self, module: Any, inputs: Any) -> None:
        self.recompute(module)
