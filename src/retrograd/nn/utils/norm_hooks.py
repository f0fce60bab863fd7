"""torch's hook forms of weight and spectral normalization: ``weight_norm`` /
``remove_weight_norm`` and ``spectral_norm`` / ``remove_spectral_norm``.

Each replaces a module's parameter ``weight`` by parameters (``weight_g`` and ``weight_v``;
``weight_orig``, with buffers ``weight_u`` and ``weight_v``) under torch's names, so torch
state dicts load unchanged, and recomputes ``module.weight`` from them in a forward pre-hook:
gradients flow to the new parameters. The normalizations themselves (``norm_except_dim``,
``weight_norm_value``, the spectral norm's power iteration) are shared with
:mod:`.parametrizations`.
"""

from __future__ import annotations

from typing import Any

from ...autodiff import no_grad
from ...errors import DTypeError, InvalidArgumentError, MissingMemberError
from ...tensor import Tensor, randn_like
from ...tensor.internal import normalize_dim
from ..functional import normalize
from ..parameter import Parameter

__all__ = [
    "check_hook_free",
    "check_weight_norm_dim",
    "install_hook",
    "norm_except_dim",
    "remove_spectral_norm",
    "remove_weight_norm",
    "spectral_norm",
    "weight_norm",
    "weight_norm_value",
]


def norm_except_dim(v: Tensor, pow: float = 2, dim: int = 0) -> Tensor:  # noqa: A002 (torch's)
    """The ``pow``-norm of ``v`` over every dimension but ``dim``, shaped to broadcast
    against ``v`` (torch's ``norm_except_dim``; ``dim=-1``: the norm of the whole tensor).

    >>> import retrograd as rg
    >>> norm_except_dim(rg.tensor([[3.0, 4.0], [6.0, 8.0]]), 2, 0).tolist()
    [[5.0], [10.0]]
    """
    if dim == -1:
        return v.norm(pow)
    if v.ndim == 0:
        return v.abs()
    dim = normalize_dim("norm_except_dim", dim, v.ndim)
    rest = [d for d in range(v.ndim) if d != dim]
    norms = v.norm(pow, dim=rest, keepdim=True) if rest else v.abs()
    return norms


def check_weight_norm_dim(op: str, weight: Tensor, dim: int) -> None:
    """``dim`` must be -1 (``None``: one norm) or a dimension of ``weight``: another one was
    taken for one norm, where torch refuses it."""
    if dim != -1 and weight.ndim:
        normalize_dim(op, dim, weight.ndim)


def weight_norm_value(v: Tensor, g: Tensor, dim: int) -> Tensor:
    """``v * (g / norm_except_dim(v, 2, dim))`` (torch's ``_weight_norm``)."""
    return v * (g / norm_except_dim(v, 2, dim))


def _hooks(module: Any) -> dict:
    hooks = module.__dict__.get("_normalization_hooks")
    if hooks is None:
        hooks = {}
        object.__setattr__(module, "_normalization_hooks", hooks)
    return hooks


def check_hook_free(module: Any, name: str, kind: str) -> None:
    if (kind, name) in _hooks(module):
        raise InvalidArgumentError(f"Cannot register two {kind} hooks on the same parameter {name}")


class _BeforeForward:
    """The forward pre-hook that recomputes the weight (an object, not a closure: a model
    with it pickles whole, as torch's ``torch.save(model)`` of a weight-normed vocoder)."""

    def __init__(self, recompute: Any):
        self.recompute = recompute

    def __call__(self, module: Any, args: Any) -> None:
        self.recompute(module)


def install_hook(module: Any, name: str, kind: str, recompute: Any, hook: Any = None) -> None:
    """Register ``hook`` (default: one calling ``recompute(module)``) before ``module``'s
    forward, under ``(kind, name)``: ``weight_norm`` and ``WeightNorm.apply`` share one
    registry, so ``remove_weight_norm`` undoes either and neither stacks on the other."""
    hooks = _hooks(module)
    handle = module.register_forward_pre_hook(hook or _BeforeForward(recompute))
    hooks[(kind, name)] = (handle, recompute)


def _uninstall(module: Any, name: str, kind: str) -> Any:
    hooks = _hooks(module)
    if (kind, name) not in hooks:
        raise InvalidArgumentError(f"{kind} of '{name}' not found in {module}")
    handle, recompute = hooks.pop((kind, name))
    handle.remove()
    return recompute


def weight_norm(module: Any, name: str = "weight", dim: int | None = 0) -> Any:
    """Reparametrize ``module.<name>`` as ``g * v / ||v||`` (torch's
    ``nn.utils.weight_norm``): parameters ``<name>_g`` (the norms over every dimension but
    ``dim``; ``dim=None`` or ``-1``: one norm) and ``<name>_v``, the weight recomputed before
    every forward. Returns ``module``.

    >>> import retrograd as rg
    >>> from retrograd import nn
    >>> layer = weight_norm(nn.Linear(3, 2))
    >>> [name for name, _ in layer.named_parameters()]
    ['bias', 'weight_g', 'weight_v']
    >>> layer.weight_g.shape
    retrograd.Size([2, 1])
    """
    dim = -1 if dim is None else dim
    check_hook_free(module, name, "weight_norm")
    weight = _registered(module, name, "weight_norm")
    check_weight_norm_dim("weight_norm", weight, dim)
    del module._parameters[name]
    module.register_parameter(f"{name}_g", Parameter(norm_except_dim(weight, 2, dim).detach()))
    module.register_parameter(f"{name}_v", Parameter(weight.detach()))

    recompute = _WeightNormRecompute(name, dim)
    recompute(module)
    install_hook(module, name, "weight_norm", recompute)
    return module


class _WeightNormRecompute:
    """``module.<name> = g * v / ||v||`` from the module's current ``<name>_g``/``_v``."""

    def __init__(self, name: str, dim: int):
        self.name, self.dim = name, dim

    def __call__(self, module: Any) -> None:
        name = self.name
        value = weight_norm_value(
            getattr(module, f"{name}_v"), getattr(module, f"{name}_g"), self.dim
        )
        object.__setattr__(module, name, value)


def remove_weight_norm(module: Any, name: str = "weight") -> Any:
    """Undo :func:`weight_norm`: ``<name>`` becomes one parameter again, holding the current
    normalized weight. Returns ``module``."""
    recompute = _uninstall(module, name, "weight_norm")
    recompute(module)
    weight = module.__dict__.pop(name)
    del module._parameters[f"{name}_g"], module._parameters[f"{name}_v"]
    module.register_parameter(name, Parameter(weight.detach()))
    return module


def _registered(module: Any, name: str, op: str) -> Tensor:
    weight = module._parameters.get(name)
    if weight is None and name in module._parameters:
        # torch's ValueError for spectral norm, its TypeError (no tensor) for weight norm
        error = InvalidArgumentError if op == "spectral_norm" else DTypeError
        raise error(f"{op}: {type(module).__name__}.{name} is None, not a Parameter")
    if weight is None:
        # torch's KeyError (its AttributeError where the module has no such attribute):
        # MissingMemberError is both
        raise MissingMemberError(
            f"{op}: {type(module).__name__} has no parameter {name!r} (parameters: "
            f"{[n for n, p in module._parameters.items() if p is not None]})"
        )
    return weight


def spectral_matrix(weight: Tensor, dim: int) -> Tensor:
    """``weight`` as a matrix whose rows run along ``dim``."""
    if dim != 0:
        order = [dim, *[d for d in range(weight.ndim) if d != dim]]
        weight = weight.permute(*order)
    if weight.ndim == 1:  # torch's ``reshape(height, -1)``: a column (a bias, say)
        return weight.unsqueeze(1)
    return weight.flatten(1)  # (reshape's -1 cannot be inferred for an empty weight)


def power_iteration(matrix: Tensor, u: Tensor, v: Tensor, steps: int, eps: float,
                    u_first: bool = False) -> tuple:  # fmt: skip
    """``steps`` rounds of ``v = normalize(W^T u)``, ``u = normalize(W v)`` outside the
    graph (the hook form's order; ``u_first``: ``u`` then ``v``, the parametrization's)."""
    with no_grad():
        matrix = matrix.detach()
        for _ in range(steps):
            if u_first:
                u = normalize(matrix.matmul(v), dim=0, eps=eps)
            v = normalize(matrix.t().matmul(u), dim=0, eps=eps)
            if not u_first:
                u = normalize(matrix.matmul(v), dim=0, eps=eps)
    return u, v


def refresh_in_place(module: Any, values: dict[str, Tensor]) -> None:
    """Write the refined power-iteration vectors into ``module``'s buffers in place, as
    torch's ``out=`` does: a reference to a buffer (``u = layer.weight_u``) sees them."""
    with no_grad():
        for name, value in values.items():
            module._buffers[name].copy_(value)


def spectrally_normalized(matrix: Tensor, weight: Tensor, u: Tensor, v: Tensor) -> Tensor:
    """``weight / sigma`` with ``sigma = u . (W v)``; ``u`` and ``v`` are constants."""
    sigma = (u * matrix.matmul(v)).sum()
    return weight / sigma


def _spectral_dim(module: Any, dim: int | None) -> int:
    if dim is not None:
        return dim
    transposed = type(module).__name__.startswith("ConvTranspose")
    return 1 if transposed else 0


def spectral_norm(module: Any, name: str = "weight", n_power_iterations: int = 1,
                  eps: float = 1e-12, dim: int | None = None) -> Any:  # fmt: skip
    """Divide ``module.<name>`` by its largest singular value, estimated by power iteration
    (torch's ``nn.utils.spectral_norm``): parameter ``<name>_orig``, buffers ``<name>_u`` and
    ``<name>_v`` (updated by ``n_power_iterations`` rounds at each forward in training mode,
    used as they are in eval mode). ``dim`` defaults to 1 for ``ConvTranspose*``, else 0.
    Returns ``module``.

    >>> from retrograd import nn
    >>> layer = spectral_norm(nn.Linear(3, 2))
    >>> sorted(layer.state_dict())
    ['bias', 'weight_orig', 'weight_u', 'weight_v']
    """
    if n_power_iterations <= 0:
        raise InvalidArgumentError(
            "spectral_norm: expected n_power_iterations to be positive, but got "
            f"n_power_iterations={n_power_iterations}"
        )
    dim = _spectral_dim(module, dim)
    check_hook_free(module, name, "spectral_norm")
    weight = _registered(module, name, "spectral_norm")
    matrix = spectral_matrix(weight.detach(), dim)
    with no_grad():
        # (a column's and a row's shapes, which an empty matrix has too)
        u = normalize(randn_like(matrix.sum(1)), dim=0, eps=eps)
        v = normalize(randn_like(matrix.sum(0)), dim=0, eps=eps)
    del module._parameters[name]
    module.register_parameter(f"{name}_orig", weight)
    object.__setattr__(module, name, weight.detach())
    module.register_buffer(f"{name}_u", u)
    module.register_buffer(f"{name}_v", v)

    install_hook(
        module, name, "spectral_norm", _SpectralNormRecompute(name, dim, n_power_iterations, eps)
    )
    return module


class _SpectralNormRecompute:
    """``module.<name> = W / sigma``, after ``n_power_iterations`` rounds of power iteration
    in training mode (or when ``power`` says so)."""

    def __init__(self, name: str, dim: int, n_power_iterations: int, eps: float):
        self.name, self.dim, self.n_power_iterations, self.eps = name, dim, n_power_iterations, eps

    def __call__(self, module: Any, power: bool | None = None) -> None:
        name = self.name
        original = getattr(module, f"{name}_orig")
        u, v = getattr(module, f"{name}_u"), getattr(module, f"{name}_v")
        matrix = spectral_matrix(original, self.dim)
        if module.training if power is None else power:
            u, v = power_iteration(matrix, u, v, self.n_power_iterations, self.eps)
            refresh_in_place(module, {f"{name}_u": u, f"{name}_v": v})
            u, v = getattr(module, f"{name}_u"), getattr(module, f"{name}_v")
        object.__setattr__(module, name, spectrally_normalized(matrix, original, u, v))


def remove_spectral_norm(module: Any, name: str = "weight") -> Any:
    """Undo :func:`spectral_norm`: ``<name>`` becomes one parameter holding the weight
    normalized with the current ``u`` and ``v``. Returns ``module``."""
    recompute = _uninstall(module, name, "spectral_norm")
    recompute(module, power=False)
    weight = module.__dict__.pop(name)
    del module._parameters[f"{name}_orig"]
    del module._buffers[f"{name}_u"], module._buffers[f"{name}_v"]
    module.register_parameter(name, Parameter(weight.detach()))
    return module
