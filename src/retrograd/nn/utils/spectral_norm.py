"""torch's ``torch.nn.utils.spectral_norm`` module: the ``SpectralNorm`` forward pre-hook
class and its state-dict hooks, which programs subclass to change the normalization (y0ast/DUE's
and jhjacobsen/invertible-resnet's ``SpectralNormFC`` divide by ``max(1, sigma / coeff)``,
overriding ``compute_weight`` and ``apply``), with the module's ``spectral_norm`` and
``remove_spectral_norm`` functions (:mod:`.norm_hooks`'; the package's names are these
functions, as torch's are).

The hook keeps torch's layout: parameter ``<name>_orig``, buffers ``<name>_u`` and
``<name>_v`` updated in place by the power iteration (``normalize(..., out=v)``), and
``<name>`` recomputed as a plain attribute before each forward.
"""

from __future__ import annotations

from typing import Any

from ...autodiff import no_grad
from ...errors import InvalidArgumentError, MissingMemberError
from ...tensor import Tensor
from ...tensor.layouts import contiguous_format
from ..functional import normalize
from ..parameter import Parameter
from .norm_hooks import remove_spectral_norm, spectral_norm

__all__ = [
    "SpectralNorm",
    "SpectralNormLoadStateDictPreHook",
    "SpectralNormStateDictHook",
    "remove_spectral_norm",
    "spectral_norm",
]


class SpectralNorm:
    """torch's spectral normalization hook: ``module.<name>`` is ``<name>_orig`` divided by
    its largest singular value ``sigma = u . (W v)``, ``u`` and ``v`` refined by
    ``n_power_iterations`` rounds of power iteration at each forward in training mode."""

    # version 1: ``<name>_v`` is kept in the state dict (torch's)
    _version: int = 1

    def __init__(
        self, name: str = "weight", n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12
    ) -> None:
        self.name = name
        self.dim = dim
        if n_power_iterations <= 0:
            raise InvalidArgumentError(
                "SpectralNorm: expected n_power_iterations to be positive, but got "
                f"n_power_iterations={n_power_iterations}"
            )
        self.n_power_iterations = n_power_iterations
        self.eps = eps

    def reshape_weight_to_matrix(self, weight: Tensor) -> Tensor:
        """``weight`` as a matrix whose rows run along ``self.dim``."""
        weight_mat = weight
        if self.dim != 0:
            weight_mat = weight_mat.permute(
                self.dim, *[d for d in range(weight_mat.dim()) if d != self.dim]
            )
        height = weight_mat.size(0)
        return weight_mat.reshape(height, -1)

    def compute_weight(self, module: Any, do_power_iteration: bool) -> Tensor:
        weight = getattr(module, self.name + "_orig")
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        weight_mat = self.reshape_weight_to_matrix(weight)
        if do_power_iteration:
            with no_grad():
                for _ in range(self.n_power_iterations):
                    # (in place: the buffers hold the refined vectors for the next forward)
                    v = normalize(weight_mat.t().mv(u), dim=0, eps=self.eps, out=v)
                    u = normalize(weight_mat.mv(v), dim=0, eps=self.eps, out=u)
                if self.n_power_iterations > 0:
                    # copies, so the next in-place update does not change what sigma used
                    u = u.clone(memory_format=contiguous_format)
                    v = v.clone(memory_format=contiguous_format)
        sigma = u.dot(weight_mat.mv(v))
        return weight / sigma

    def remove(self, module: Any) -> None:
        with no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        delattr(module, self.name)
        delattr(module, self.name + "_u")
        delattr(module, self.name + "_v")
        delattr(module, self.name + "_orig")
        module.register_parameter(self.name, Parameter(weight.detach()))

    def __call__(self, module: Any, inputs: Any) -> None:
        setattr(module, self.name, self.compute_weight(module, do_power_iteration=module.training))

    def _solve_v_and_rescale(self, weight_mat: Tensor, u: Tensor, target_sigma: Any) -> Tensor:
        """The ``v`` for which ``u . (W v)`` is ``target_sigma`` (a state dict of version 0
        kept no ``v``)."""
        from ... import linalg

        v = linalg.multi_dot(
            [weight_mat.t().mm(weight_mat).pinverse(), weight_mat.t(), u.unsqueeze(1)]
        ).squeeze(1)
        return v.mul_(target_sigma / u.dot(weight_mat.mv(v)))

    @staticmethod
    def apply(module: Any, name: str, n_power_iterations: int, dim: int, eps: float) -> Any:
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, SpectralNorm) and hook.name == name:
                raise InvalidArgumentError(
                    f"Cannot register two spectral_norm hooks on the same parameter {name}"
                )
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        weight = module._parameters.get(name)
        if weight is None:  # torch's KeyError (MissingMemberError is one)
            raise MissingMemberError(
                f"SpectralNorm: {type(module).__name__} has no parameter {name!r}; "
                "spectral_norm cannot be applied to an uninitialized or absent parameter"
            )
        with no_grad():
            weight_mat = fn.reshape_weight_to_matrix(weight)
            h, w = weight_mat.size()
            u = normalize(weight.new_empty(h).normal_(0, 1), dim=0, eps=fn.eps)
            v = normalize(weight.new_empty(w).normal_(0, 1), dim=0, eps=fn.eps)
        delattr(module, fn.name)
        module.register_parameter(fn.name + "_orig", weight)
        # ``<name>`` must exist before the first forward (initializers read it), as a plain
        # attribute: assigning the Parameter would register it again
        setattr(module, fn.name, weight.data)
        module.register_buffer(fn.name + "_u", u)
        module.register_buffer(fn.name + "_v", v)
        module.register_forward_pre_hook(fn)
        module._register_state_dict_hook(SpectralNormStateDictHook(fn))
        module._register_load_state_dict_pre_hook(SpectralNormLoadStateDictPreHook(fn))
        return fn


class SpectralNormLoadStateDictPreHook:
    """Loads a state dict of version 0 (``<name>`` and ``<name>_u`` kept, no ``<name>_v``):
    ``v`` is solved from the saved weight's sigma."""

    def __init__(self, fn: SpectralNorm) -> None:
        self.fn = fn

    def __call__(
        self,
        state_dict: Any,
        prefix: str,
        local_metadata: dict,
        strict: bool,
        missing_keys: list,
        unexpected_keys: list,
        error_msgs: list,
    ) -> None:
        fn = self.fn
        version = local_metadata.get("spectral_norm", {}).get(fn.name + ".version", None)
        if version is not None and version >= 1:
            return
        weight_key = prefix + fn.name
        if (
            version is None
            and all(weight_key + s in state_dict for s in ("_orig", "_u", "_v"))
            and weight_key not in state_dict
        ):
            return  # a current state dict without its metadata (one built by hand)
        has_missing_keys = False
        for suffix in ("_orig", "", "_u"):
            key = weight_key + suffix
            if key not in state_dict:
                has_missing_keys = True
                if strict:
                    missing_keys.append(key)
        if has_missing_keys:
            return
        from ...tensor import as_tensor

        with no_grad():
            weight_orig = as_tensor(state_dict[weight_key + "_orig"])
            weight = as_tensor(state_dict.pop(weight_key))
            sigma = (weight_orig / weight).mean()
            weight_mat = fn.reshape_weight_to_matrix(weight_orig)
            u = as_tensor(state_dict[weight_key + "_u"])
            state_dict[weight_key + "_v"] = fn._solve_v_and_rescale(weight_mat, u, sigma)


class SpectralNormStateDictHook:
    """Records the hook's version in the state dict's metadata (``spectral_norm``'s
    ``<name>.version``)."""

    def __init__(self, fn: SpectralNorm) -> None:
        self.fn = fn

    def __call__(self, module: Any, state_dict: Any, prefix: str, local_metadata: dict) -> None:
        if "spectral_norm" not in local_metadata:
            local_metadata["spectral_norm"] = {}
        key = self.fn.name + ".version"
        if key in local_metadata["spectral_norm"]:
            raise InvalidArgumentError(f"Unexpected key in metadata['spectral_norm']: {key}")
        local_metadata["spectral_norm"][key] = self.fn._version
