"""torch's ``torch.nn.utils.prune``: a parameter ``<name>`` of a module becomes the parameter
``<name>_orig`` and the buffer ``<name>_mask``, and ``module.<name>`` (a plain attribute, the
masked tensor ``<name>_orig * <name>_mask``) is recomputed by a forward pre-hook, so gradients
flow to ``<name>_orig`` through the mask and torch's state dicts (``conv1.weight_orig``,
``conv1.weight_mask``) load unchanged. Pruning a parameter again combines the masks as
torch's ``PruningContainer`` does (the new method sees only what is left); :func:`remove` makes
the pruning permanent.

The methods are torch's: ``Identity``, ``RandomUnstructured``, ``L1Unstructured``,
``RandomStructured``, ``LnStructured``, ``CustomFromMask``, with their functional forms and
``global_unstructured``. The random ones draw from ``rg.seed``'s stream (not torch's).

>>> import retrograd as rg
>>> from retrograd import nn
>>> layer = nn.Linear(2, 2)
>>> with rg.no_grad():
...     _ = layer.weight.copy_(rg.tensor([[0.1, -2.0], [3.0, -0.2]]))
>>> _ = l1_unstructured(layer, "weight", amount=2)
>>> layer.weight.tolist(), layer.weight_mask.tolist()
([[0.0, -2.0], [3.0, -0.0]], [[0.0, 1.0], [1.0, 0.0]])
>>> [name for name, _ in layer.named_parameters()]
['bias', 'weight_orig']
"""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from ...errors import DTypeError, IndexOutOfRangeError, InvalidArgumentError, ShapeError
from ...tensor import Tensor, cat, ones_like, zeros_like
from ...tensor import rand as _rand

__all__ = [
    "BasePruningMethod",
    "CustomFromMask",
    "Identity",
    "L1Unstructured",
    "LnStructured",
    "PruningContainer",
    "RandomStructured",
    "RandomUnstructured",
    "custom_from_mask",
    "global_unstructured",
    "identity",
    "is_pruned",
    "l1_unstructured",
    "ln_structured",
    "random_structured",
    "random_unstructured",
    "remove",
]


class BasePruningMethod(ABC):
    """A pruning method: :meth:`compute_mask` says which entries to keep; applied to a
    module's parameter by :meth:`apply`, it is that module's forward pre-hook."""

    _tensor_name: str | None = None
    PRUNING_TYPE: str = "unstructured"

    def __call__(self, module: Any, inputs: Any) -> None:
        object.__setattr__(module, self._tensor_name, self.apply_mask(module))

    @abstractmethod
    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        """The mask of ``t`` (a tensor of its shape), given the mask so far."""

    def apply_mask(self, module: Any) -> Tensor:
        """``<name>_orig * <name>_mask`` of ``module``."""
        if self._tensor_name is None:
            raise InvalidArgumentError(f"Module {module} has to be pruned")
        orig = getattr(module, self._tensor_name + "_orig")
        mask = getattr(module, self._tensor_name + "_mask")
        return mask.to(dtype=orig.dtype) * orig

    @classmethod
    def apply(
        cls, module: Any, name: str, *args: Any, importance_scores: Any = None, **kwargs: Any
    ) -> BasePruningMethod:
        """Prune ``module.<name>`` by ``cls(*args, **kwargs)`` (combined with an earlier
        pruning of it), scoring the entries by ``importance_scores`` (the parameter itself by
        default); returns the method, now the module's forward pre-hook."""
        old_method, old_key = None, None
        for key, hook in _pre_hooks(module).items():
            if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
                if old_method is not None:
                    raise InvalidArgumentError(
                        f"prune: more than one pruning hook of '{name}' on {type(module).__name__}"
                    )
                old_method, old_key = hook, key
        method = cls(*args, **kwargs)
        method._tensor_name = name
        if old_method is not None:
            if isinstance(old_method, PruningContainer):
                old_method.add_pruning_method(method)
                method = old_method
            else:
                container = PruningContainer(old_method)
                container.add_pruning_method(method)
                method = container
        orig = getattr(module, name)
        if importance_scores is not None:
            if tuple(importance_scores.shape) != tuple(orig.shape):
                raise ShapeError(
                    f"prune: importance_scores should have the same shape as parameter {name} "
                    f"of {type(module).__name__}, {tuple(orig.shape)}, got "
                    f"{tuple(importance_scores.shape)}"
                )
        else:
            importance_scores = orig
        if old_method is None:
            if name not in module._parameters or orig is None:
                # torch's TypeError: a buffer, a computed tensor (a weight another
                # reparametrization makes) or None cannot become ``<name>_orig``
                found = "None" if orig is None else "not a Parameter"
                raise DTypeError(
                    f"prune: {type(module).__name__}.{name} is {found}; only a registered "
                    "Parameter can be pruned"
                )
            module.register_parameter(name + "_orig", orig)
            del module._parameters[name]
            default_mask = ones_like(orig).detach()
        else:
            default_mask = getattr(module, name + "_mask").detach().clone()
        try:
            mask = method.compute_mask(importance_scores.detach(), default_mask=default_mask)
            module.register_buffer(name + "_mask", mask)
            object.__setattr__(module, name, method.apply_mask(module))
        except Exception:
            if old_method is None:
                orig = module._parameters.pop(name + "_orig")
                module.register_parameter(name, orig)
            raise
        if old_key is not None:
            _remove_pre_hook(module, old_key)
        module.register_forward_pre_hook(method)
        return method

    def prune(
        self, t: Tensor, default_mask: Tensor | None = None, importance_scores: Any = None
    ) -> Tensor:
        """``t`` times the mask this method computes for it (torch's ``prune``)."""
        scores = t if importance_scores is None else importance_scores
        mask = self.compute_mask(scores, ones_like(t) if default_mask is None else default_mask)
        return t * mask

    def remove(self, module: Any) -> None:
        """Make the pruning permanent: ``<name>`` a parameter again holding the masked
        values (the ``<name>_orig`` object, so optimizers holding it keep it)."""
        if self._tensor_name is None:
            raise InvalidArgumentError(
                f"Module {module} has to be pruned before pruning can be removed"
            )
        weight = self.apply_mask(module)
        module.__dict__.pop(self._tensor_name, None)
        orig = module._parameters.pop(self._tensor_name + "_orig")
        orig.data = weight.data
        del module._buffers[self._tensor_name + "_mask"]
        module.register_parameter(self._tensor_name, orig)


class PruningContainer(BasePruningMethod):
    """Pruning methods applied one after another to one parameter: each new one computes
    its mask over the entries (or channels) the earlier ones left."""

    def __init__(self, *args: Any):
        self._pruning_methods: tuple[BasePruningMethod, ...] = ()
        if len(args) == 1 and not isinstance(args[0], Iterable):
            self._tensor_name = args[0]._tensor_name
            self.add_pruning_method(args[0])
        elif len(args) == 1 and isinstance(args[0], Iterable):
            for method in args[0]:
                self.add_pruning_method(method)
        else:
            for method in args:
                self.add_pruning_method(method)

    def add_pruning_method(self, method: BasePruningMethod) -> None:
        if not isinstance(method, BasePruningMethod) and method is not None:
            raise InvalidArgumentError(f"{type(method)} is not a BasePruningMethod subclass")
        if method is not None and self._tensor_name != method._tensor_name:
            raise InvalidArgumentError(
                f"Can only add pruning methods acting on the parameter named "
                f"'{self._tensor_name}' to PruningContainer. Found '{method._tensor_name}'"
            )
        self._pruning_methods += (method,)

    def __len__(self) -> int:
        return len(self._pruning_methods)

    def __iter__(self) -> Any:
        return iter(self._pruning_methods)

    def __getitem__(self, idx: int) -> BasePruningMethod:
        return self._pruning_methods[idx]

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        method = self._pruning_methods[-1]
        mask = default_mask.to(dtype=t.dtype)
        if method.PRUNING_TYPE == "unstructured":
            kept = default_mask == 1
            partial = method.compute_mask(t[kept], default_mask=default_mask[kept])
            mask[kept] = partial.to(dtype=mask.dtype)
            return mask
        if method.PRUNING_TYPE == "structured":
            dim = method.dim + t.ndim if method.dim < 0 else method.dim
            if not 0 <= dim < t.ndim:
                raise IndexOutOfRangeError(
                    f"prune: dimension {method.dim} is out of range for {t.ndim} dims"
                )
            others = [d for d in range(t.ndim) if d != dim]
            keep_channel = default_mask.sum(dim=others) != 0
            slc: list[Any] = [slice(None)] * t.ndim
            slc[dim] = keep_channel
            partial = method.compute_mask(t[tuple(slc)], default_mask=default_mask[tuple(slc)])
            mask[tuple(slc)] = partial.to(dtype=mask.dtype)
            return mask
        if method.PRUNING_TYPE == "global":
            return method.compute_mask(t, default_mask=default_mask).to(dtype=mask.dtype)
        raise InvalidArgumentError(f"Unrecognized PRUNING_TYPE {method.PRUNING_TYPE}")


class Identity(BasePruningMethod):
    """Prunes nothing (the mask of ones)."""

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        return default_mask

    @classmethod
    def apply(cls, module: Any, name: str) -> BasePruningMethod:  # type: ignore[override]
        return super().apply(module, name)


class RandomUnstructured(BasePruningMethod):
    """Prunes ``amount`` entries (a count, or a fraction) chosen at random."""

    def __init__(self, amount: Any):
        _validate_amount_init(amount)
        self.amount = amount

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        count = _count(self.amount, t.numel())
        mask = default_mask.clone()
        if count != 0:
            prob = _rand(tuple(t.shape), dtype=t.dtype)
            indices = prob.reshape(-1).topk(count).indices
            mask.view(-1)[indices] = 0
        return mask

    @classmethod
    def apply(cls, module: Any, name: str, amount: Any) -> BasePruningMethod:  # type: ignore[override]
        return super().apply(module, name, amount=amount)


class L1Unstructured(BasePruningMethod):
    """Prunes the ``amount`` entries (a count, or a fraction) of smallest absolute value."""

    def __init__(self, amount: Any):
        _validate_amount_init(amount)
        self.amount = amount

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        count = _count(self.amount, t.numel())
        mask = default_mask.clone()
        if count != 0:
            indices = t.abs().reshape(-1).topk(count, largest=False).indices
            mask.view(-1)[indices] = 0
        return mask

    @classmethod
    def apply(  # type: ignore[override]
        cls, module: Any, name: str, amount: Any, importance_scores: Any = None
    ) -> BasePruningMethod:
        return super().apply(module, name, amount=amount, importance_scores=importance_scores)


class RandomStructured(BasePruningMethod):
    """Prunes ``amount`` channels (slices along ``dim``) chosen at random."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount: Any, dim: int = -1):
        _validate_amount_init(amount)
        self.amount, self.dim = amount, dim

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        _validate_structured(t, self.dim)
        size = t.shape[self.dim]
        count = _count(self.amount, size)
        if count == 0:
            return default_mask
        prob = _rand((size,), dtype=t.dtype)
        threshold = prob.kthvalue(count).values
        return _channel_mask(t, self.dim, prob > threshold) * default_mask.to(dtype=t.dtype)

    @classmethod
    def apply(cls, module: Any, name: str, amount: Any, dim: int = -1) -> BasePruningMethod:  # type: ignore[override]
        return super().apply(module, name, amount=amount, dim=dim)


class LnStructured(BasePruningMethod):
    """Prunes the ``amount`` channels (slices along ``dim``) of smallest ``n``-norm."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount: Any, n: Any, dim: int = -1):
        _validate_amount_init(amount)
        self.amount, self.n, self.dim = amount, n, dim

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        _validate_structured(t, self.dim)
        size = t.shape[self.dim]
        count = _count(self.amount, size)
        if count == 0:
            return default_mask
        dim = self.dim % t.ndim
        others = [d for d in range(t.ndim) if d != dim]
        norm = t.norm(p=self.n, dim=others)
        kept = norm.topk(size - count, largest=True).indices
        keep = zeros_like(norm).bool()
        keep[kept] = True
        return _channel_mask(t, self.dim, keep) * default_mask.to(dtype=t.dtype)

    @classmethod
    def apply(  # type: ignore[override]
        cls, module: Any, name: str, amount: Any, n: Any, dim: int, importance_scores: Any = None
    ) -> BasePruningMethod:
        return super().apply(
            module, name, amount=amount, n=n, dim=dim, importance_scores=importance_scores
        )


class CustomFromMask(BasePruningMethod):
    """Prunes where the given ``mask`` is 0."""

    PRUNING_TYPE = "global"

    def __init__(self, mask: Tensor):
        self.mask = mask

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        if tuple(default_mask.shape) != tuple(self.mask.shape):
            raise ShapeError(
                f"prune: the mask has shape {tuple(self.mask.shape)}, the parameter "
                f"{tuple(default_mask.shape)}"
            )
        return default_mask * self.mask.to(dtype=default_mask.dtype)

    @classmethod
    def apply(cls, module: Any, name: str, mask: Tensor) -> BasePruningMethod:  # type: ignore[override]
        return super().apply(module, name, mask=mask)


# -- the functional forms --------------------------------------------------------------------------
def identity(module: Any, name: str) -> Any:
    Identity.apply(module, name)
    return module


def random_unstructured(module: Any, name: str, amount: Any) -> Any:
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module: Any, name: str, amount: Any, importance_scores: Any = None) -> Any:
    L1Unstructured.apply(module, name, amount=amount, importance_scores=importance_scores)
    return module


def random_structured(module: Any, name: str, amount: Any, dim: int) -> Any:
    RandomStructured.apply(module, name, amount, dim)
    return module


def ln_structured(
    module: Any, name: str, amount: Any, n: Any, dim: int, importance_scores: Any = None
) -> Any:
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def custom_from_mask(module: Any, name: str, mask: Tensor) -> Any:
    CustomFromMask.apply(module, name, mask)
    return module


def global_unstructured(
    parameters: Iterable[tuple[Any, str]],
    pruning_method: Any,
    importance_scores: dict | None = None,
    **kwargs: Any,
) -> None:
    """Prune the ``(module, name)`` pairs together: ``pruning_method`` (an unstructured
    method's class) ranks all their entries at once, then each gets its slice of the mask."""
    parameters = list(parameters)
    scores = importance_scores if importance_scores is not None else {}
    if not isinstance(scores, dict):
        raise InvalidArgumentError("global_unstructured: importance_scores must be a dict")
    relevant = _flat(
        [scores.get((module, name), getattr(module, name)).detach() for module, name in parameters]
    )
    default_mask = _flat(
        [
            getattr(module, name + "_mask", ones_like(getattr(module, name))).detach()
            for module, name in parameters
        ]
    )
    container = PruningContainer()
    container._tensor_name = "temp"
    method = pruning_method(**kwargs)
    method._tensor_name = "temp"
    if method.PRUNING_TYPE != "unstructured":
        raise InvalidArgumentError(
            'Only "unstructured" PRUNING_TYPE supported for the `pruning_method`. Found '
            f"method {pruning_method} of type {method.PRUNING_TYPE}"
        )
    container.add_pruning_method(method)
    final_mask = container.compute_mask(relevant, default_mask)
    pointer = 0
    for module, name in parameters:
        param = getattr(module, name)
        count = param.numel()
        custom_from_mask(module, name, mask=final_mask[pointer : pointer + count].view_as(param))
        pointer += count


def remove(module: Any, name: str) -> Any:
    """Make the pruning of ``module.<name>`` permanent (see :meth:`BasePruningMethod.remove`)."""
    for key, hook in _pre_hooks(module).items():
        if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
            hook.remove(module)
            _remove_pre_hook(module, key)
            return module
    raise InvalidArgumentError(
        f"Parameter '{name}' of module {module} has to be pruned before pruning can be removed"
    )


def is_pruned(module: Any) -> bool:
    """Whether ``module`` or a sub-module has a pruning hook."""
    return any(
        isinstance(hook, BasePruningMethod)
        for _, sub in module.named_modules()
        for hook in _pre_hooks(sub).values()
    )


# -- helpers ---------------------------------------------------------------------------------------
def _flat(tensors: list[Tensor]) -> Tensor:
    """The tensors flattened and concatenated (``parameters_to_vector``'s layout)."""
    return cat([t.reshape(-1) for t in tensors])


def _pre_hooks(module: Any) -> dict[int, Any]:
    return module._forward_pre_hooks


def _remove_pre_hook(module: Any, key: int) -> None:
    hooks = module.__dict__.get("_call_hooks")
    if hooks is not None:
        hooks["pre"].pop(key, None)


def _validate_amount_init(amount: Any) -> None:
    if not isinstance(amount, numbers.Real) or isinstance(amount, bool):
        raise InvalidArgumentError(f"Invalid type for amount: {amount}. Must be int or float.")
    if (isinstance(amount, numbers.Integral) and amount < 0) or (
        not isinstance(amount, numbers.Integral) and (float(amount) > 1.0 or float(amount) < 0.0)
    ):
        raise InvalidArgumentError(
            f"amount={amount} should either be a float in the range [0, 1] or a non-negative "
            "integer"
        )


def _count(amount: Any, size: int) -> int:
    count = int(amount) if isinstance(amount, numbers.Integral) else round(amount * size)
    if count > size:
        raise InvalidArgumentError(
            f"amount={amount} should be smaller than the number of parameters to prune={size}"
        )
    return count


def _validate_structured(t: Tensor, dim: int) -> None:
    if t.ndim <= 1:
        raise ShapeError("Structured pruning can only be applied to multidimensional tensors")
    if dim >= t.ndim or dim < -t.ndim:
        raise IndexOutOfRangeError(
            f"prune: invalid dim {dim} for a tensor of shape {tuple(t.shape)}"
        )


def _channel_mask(t: Tensor, dim: int, keep: Tensor) -> Tensor:
    mask = zeros_like(t)
    slc: list[Any] = [slice(None)] * t.ndim
    slc[dim] = keep
    mask[tuple(slc)] = 1
    return mask
