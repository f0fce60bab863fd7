"""SGD, Adam, AdamW and RMSprop over parameter groups, stepping on a ``Gradients`` value.

An optimizer takes what ``torch.optim`` takes (an iterable of parameters, or of parameter
groups: dicts with ``"params"`` and per-group hyper-parameters) or, as before, a module. Its
``param_groups`` are torch's: ``for g in optimizer.param_groups: g["lr"] = lr`` is how a
schedule sets the learning rate. Parameters are identified by object: a tied parameter is one
parameter with one state.

Each step computes on the inner backend (no graph is recorded): a *pure* update function per
algorithm (``sgd_update``, ``adam_update``, ``rmsprop_update``: ``(value, grad, state,
hyper-parameters) -> (new value, new state)``, each a call of its fused kernel through
:class:`~.fused.FusedUpdate`) gives the new value, which replaces the
parameter's value in place (:func:`retrograd.tensor.inplace.assign`: the object, its leaf
status and its distributed mark stay). The formulas are PyTorch's single-tensor loops, line for
line, each fused line (``add_(alpha=)``, ``lerp_``, ``addcmul_``) rounded once as torch's, so
float32 results are torch's bit for bit (tests/test_optim_bits.py; where torch's ``sqrt`` is
correctly rounded). SGD, Adam and RMSprop run one fused backend kernel per parameter
(``Backend.sgd_update``, ``adam_update``, ``rmsprop_update``).

*Memory written in place.* As torch's optimizers do, ``Optimizer.step`` writes SGD's and
Adam's new values and state into the parameter's own buffers (no array made per step: on a
large model, fresh arrays every step cost more in page faults than the arithmetic) -- but only
where nothing else can see those buffers, so that the in-place step is indistinguishable from
the pure one: the same bits, and every other tensor, saved value and copy unchanged
(:func:`sole_reference`). A graph still alive that saved a parameter (a forward recorded and
not yet backpropagated, a checkpointer's recomputation), ``p.detach()``, ``p.data``, a view,
``p.numpy()``, a capture's constant, a state buffer a caller kept (``b =
optimizer.state[p]["exp_avg"]``): each holds a reference, and that parameter's step makes new
arrays instead, as the pure functions always do. ``state_dict()`` copies. So, unlike torch, a
detached alias of a parameter keeps its old values rather than following the update.
"""

from __future__ import annotations

import math
import operator
import warnings
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..autodiff.handles import RemovableHandle
from ..backend.protocol import default_float_dtype
from ..context import captured_writes
from ..effects import WRITES
from ..errors import (
    AutodiffError,
    DTypeError,
    InvalidArgumentError,
    KeyMismatchError,
    RetrogradError,
    ShapeError,
    check_iterable,
    shape_text,
)
from ..step_hooks import StepHooks, hooked_step, register_in
from ..tensor import Tensor, tensor, zeros_like
from ..tensor.dtypes import cast_host
from ..tensor.inplace import assign
from ..tensor.kept_gradients import (
    forget_gradient,
    keeps_zero_gradient,
    mark_gradient_held,
    mark_gradient_joined,
    zero_kept_gradient,
)
from ..tensor.ownership import HELD_ONCE as _HELD_ONCE
from ..tensor.ownership import count as _count
from ..tensor.views import remember_leaf
from .closure import evaluate_closure
from .fused import ADAM, RMSPROP, SGD_MOMENTUM, FusedUpdate, empty_buffer

__all__ = [
    "SGD",
    "Adam",
    "AdamW",
    "FusedOptimizer",
    "Optimizer",
    "RMSprop",
    "adam_update",
    "required",
    "rmsprop_update",
    "sgd_update",
    "sole_reference",
]

State = dict[str, Any]

_DUPLICATE_PARAMETERS = (
    "optimizer contains a parameter group with duplicate parameters; in future, this will "
    "cause an error; see github.com/pytorch/pytorch/issues/40967 for more information"
)


# -- the pure updates -----------------------------------------------------------------------------
def sgd_update(
    value: Tensor,
    grad: Tensor,
    state: State,
    *,
    lr: float,
    momentum: float = 0.0,
    dampening: float = 0.0,
    weight_decay: float = 0.0,
    nesterov: bool = False,
    in_place: bool = False,
) -> tuple[Tensor, State]:
    """``torch.optim.SGD``: ``d = g + weight_decay * p``; with momentum
    ``b = momentum * b + (1 - dampening) * d`` (``b = d`` at the first step) and
    ``d = d + momentum * b`` (Nesterov) or ``d = b``; then ``p = p - lr * d``
    (``Backend.sgd_update``, one kernel).

    ``in_place=True`` lets the kernel write the new value into ``value`` and the new buffer
    into ``state["momentum_buffer"]`` (same bits): for a caller holding the only references
    to both, as :meth:`Optimizer.step` does (:func:`sole_reference`).
    """
    settings = {
        "lr": lr,
        "momentum": momentum,
        "dampening": dampening,
        "weight_decay": weight_decay,
        "nesterov": nesterov,
    }
    return SGD_MOMENTUM.run(value, grad, state, settings, in_place)


def adam_update(
    value: Tensor,
    grad: Tensor,
    state: State,
    *,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    decoupled: bool = False,
    in_place: bool = False,
) -> tuple[Tensor, State]:
    """Adam (``torch.optim.Adam``; ``decoupled``: AdamW's weight decay, ``p *= 1 - lr wd``):
    ``m = m + (1 - beta1) (g - m)``, ``v = beta2 v + (1 - beta2) g^2``, then
    ``p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)``.
    ``state["step"]`` is the step count *after* this step. ``in_place``: as for
    :func:`sgd_update`, the kernel may write into ``value`` and the two moments."""
    settings = {
        "lr": lr,
        "beta1": betas[0],
        "beta2": betas[1],
        "eps": eps,
        "weight_decay": weight_decay,
        "decoupled": decoupled,
    }
    return ADAM.run(value, grad, state, settings, in_place)


def rmsprop_update(
    value: Tensor,
    grad: Tensor,
    state: State,
    *,
    lr: float,
    alpha: float = 0.99,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    momentum: float = 0.0,
    centered: bool = False,
    in_place: bool = False,
) -> tuple[Tensor, State]:
    """``torch.optim.RMSprop``: ``v = alpha v + (1 - alpha) g^2``; the denominator is
    ``sqrt(v) + eps`` (centered: ``sqrt(v - a^2) + eps``, ``a`` the running mean gradient);
    with momentum ``b = momentum b + g / denominator`` and ``p = p - lr b``, else
    ``p = p - lr g / denominator`` (``Backend.rmsprop_update``, one kernel). ``in_place``: as
    for :func:`sgd_update`, the kernel may write into ``value`` and the state's buffers."""
    settings = {
        "lr": lr,
        "alpha": alpha,
        "eps": eps,
        "weight_decay": weight_decay,
        "momentum": momentum,
        "centered": centered,
    }
    return RMSPROP.run(value, grad, state, settings, in_place)


# -- the optimizers -------------------------------------------------------------------------------
class _RequiredParameter:
    """torch's ``required``: the default of a hyper-parameter every parameter group must give
    (``def __init__(self, params, lr=required, ...)`` in optimizers written as torch's)."""

    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()


class Optimizer(StepHooks):
    """Base class: parameter groups, per-parameter state, the step, state dicts.

    Subclasses give their ``defaults`` (every hyper-parameter, ``lr`` first) and
    :meth:`update`, which maps ``(value, grad, state, group)`` to ``(new value, new state)``
    on the inner backend.
    """

    def __init__(self, params: Any, defaults: dict[str, Any]):
        if not isinstance(defaults, Mapping):  # a subclass's (or a user's own) constructor
            raise DTypeError(
                f"{type(self).__name__}: defaults must be a dict of hyper-parameters, got "
                f"{type(defaults).__name__}"
            )
        defaults = dict(defaults)
        lr = defaults.get("lr")
        lr_required = lr is required
        # required: each group gives its own (add_param_group checks); None, an algorithm of
        # the user's own that needs none (transformers' Adafactor: its relative step)
        if lr_required or (lr is None and self.steps_itself):
            lr = 0.0
        elif isinstance(lr, Tensor) and lr.numel() == 1 and str(lr.dtype) != "bool":
            lr = defaults["lr"] = float(lr.item())  # torch's tensor lr: its value here
        elif _numpy_number(lr):  # np.float32(3e-4), a 0-d array: torch takes them too
            lr = defaults["lr"] = float(lr)
        if not isinstance(lr, int | float) or isinstance(lr, bool):
            raise DTypeError(f"{type(self).__name__}: lr must be a number, got {lr!r}")
        if not lr >= 0.0:
            raise InvalidArgumentError(
                f"{type(self).__name__}: lr must be non-negative, got {lr!r}"
            )
        self.defaults = defaults
        # torch checks the constructor's values themselves, even where every group gives its
        # own (Adagrad(groups, weight_decay=-0.1) with a weight_decay in each group is refused)
        self._check_group({**{k: v for k, v in defaults.items() if v is not required}, "lr": lr})
        #: the module given, if one was (the old form ``Optimizer(module, ...)``)
        self.module = params if hasattr(params, "named_parameters") else None
        #: torch's groups: dicts of ``"params"`` (a list of tensors) and hyper-parameters
        self.param_groups: list[dict[str, Any]] = []
        #: per parameter (the tensor object itself, hashed by identity): step count, buffers;
        #: a ``defaultdict(dict)`` as torch's, so an optimizer written as torch's are
        #: (``param_state = self.state[p]; if 'mu' not in param_state: ...``) finds an empty
        #: entry for a parameter it has not stepped yet
        self.state: dict[Tensor, State] = defaultdict(dict)
        if self.module is not None:
            params = self.module.parameters()
        if isinstance(params, Tensor):
            raise InvalidArgumentError(
                f"{type(self).__name__}: params must be an iterable of tensors, of parameter "
                "groups, or a module; got a single tensor"
            )
        try:
            groups = list(params)
        except TypeError:
            raise DTypeError(
                f"{type(self).__name__}: params must be an iterable of tensors, of parameter "
                f"groups, or a module; got {type(params).__name__}"
            ) from None
        if not groups:
            raise InvalidArgumentError(f"{type(self).__name__}: got an empty parameter list")
        if not isinstance(groups[0], Mapping):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)
        #: the learning rate given at construction (schedules scale from each group's own)
        self.initial_lr = float(self.param_groups[0]["lr"] if lr_required else lr)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every subclass's own ``step`` runs torch's step hooks, as torch's base class makes
        every optimizer's do (:func:`_hooked_step`)."""
        super().__init_subclass__(**kwargs)
        if "step" in vars(cls):
            cls.step = hooked_step(vars(cls)["step"])

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickling and ``copy.deepcopy``: the attributes restored, as torch's base class
        does; an optimizer written as torch's (RAdam, Sophia-G, Adan) calls
        ``super().__setstate__(state)`` from its own and then sets its groups' defaults."""
        self.__dict__.update(state)

    @property
    def steps_itself(self) -> bool:
        """Whether :meth:`step` is the subclass's own code (an optimizer written as torch's
        are, reading ``p.grad(grads)`` and writing its parameters in place: Lion, Sophia,
        Adan), not one of retrograd's algorithms. torch's base class checks none of such an
        optimizer's hyper-parameters (transformers' Adafactor's ``lr=None``, Adan's three
        ``betas``) and loads its state back as it was saved (Sophia's step a tensor). A
        subclass of one of retrograd's algorithms (its ``update``) keeps that algorithm's
        checks and state, whatever its ``step`` adds."""
        if type(self).update is not Optimizer.update:
            return False
        module = getattr(type(self).step, "__module__", None) or ""
        return not module.startswith("retrograd.")

    def add_param_group(self, param_group: Mapping[str, Any]) -> None:
        """Add a group (``{"params": [...], "lr": ..., ...}``); missing hyper-parameters take
        the optimizer's defaults. A parameter may be in one group only; listed twice in it,
        it is kept twice, with torch's warning, and stepped at each place (one state)."""
        group = param_group
        if not isinstance(group, Mapping) or "params" not in group:
            raise InvalidArgumentError(
                f"{type(self).__name__}: a parameter group is a dict with 'params', got "
                f"{type(group).__name__}"
            )
        params = group["params"]
        if isinstance(params, set | frozenset):  # torch's refusal: state_dict() numbers the
            raise DTypeError(  # parameters by position, and a set's order changes per run
                f"{type(self).__name__}: a group's params must be an ordered collection (a "
                "list), not a set: the order of tensors in a set changes between runs, and "
                "load_state_dict matches parameters by position"
            )
        check_iterable(type(self).__name__, params, "a group's params")
        params = [params] if isinstance(params, Tensor) else list(params)
        params, names = self._named(params)
        seen: set[int] = set()
        for p in params:
            if not isinstance(p, Tensor):
                raise InvalidArgumentError(
                    f"{type(self).__name__}: parameters must be tensors, got {type(p).__name__}"
                )
            if not p.is_leaf:  # torch's refusal: no gradient of its own, never updated
                raise InvalidArgumentError(
                    f"{type(self).__name__}: can't optimize a non-leaf tensor (the "
                    f"{shape_text(p.shape)} result of an op on tensors requiring grad); pass "
                    "the leaf, or a detached copy made a parameter"
                )
            seen.add(id(p))
        if len(seen) != len(params):  # torch's warning: kept, and stepped at each place
            warnings.warn(_DUPLICATE_PARAMETERS, UserWarning, stacklevel=3)
        for other in self.param_groups:
            # torch's rule, against every group: a group of no parameters has no names, so
            # it joins no optimizer of named groups (nor a named group one that holds it)
            if (names is not None) != ("param_names" in other):
                raise InvalidArgumentError(
                    f"{type(self).__name__}: all optimizer param groups should be with/without "
                    "names; cannot add a param group "
                    + (
                        "with names to an optimizer without"
                        if names is not None
                        else "without names (an empty group has none) to an optimizer with"
                    )
                )
        for other in self.param_groups:
            if any(id(p) in seen for p in other["params"]):
                raise InvalidArgumentError(
                    f"{type(self).__name__}: some parameters appear in more than one group"
                )
        # torch's order: the group's own entries, its names, then the defaults it lacks
        new = {k: (params if k == "params" else v) for k, v in group.items()}
        if names is not None:
            new["param_names"] = names
        for key, default in self.defaults.items():
            new.setdefault(key, default)
        missing = [k for k, v in new.items() if v is required]
        if missing:
            raise InvalidArgumentError(
                f"{type(self).__name__}: parameter group didn't specify a value of required "
                f"optimization parameter {missing[0]}"
            )
        self._check_group(new)
        self.param_groups.append(new)
        for p in params:
            # torch's p.grad, set by a backward before the parameter joined this optimizer:
            # zero_grad(set_to_none=False) zeroes it, and later steps step it with that zero
            mark_gradient_joined(p)

    def _named(self, params: list[Any]) -> tuple[list[Any], list[Any] | None]:
        """A group's parameters and, given as torch 2.6's ``(name, parameter)`` pairs
        (``optim.AdamW(model.named_parameters())``), their names (``None`` when given
        bare). The groups of one optimizer are all named or none is, as torch requires."""
        named = [isinstance(p, tuple) for p in params]
        if any(named) and not all(named):
            raise InvalidArgumentError(
                f"{type(self).__name__}: all optimizer params should be with/without names "
                "((name, parameter) pairs, as named_parameters() gives, or parameters); some "
                "param names are missing"
            )
        if not any(named):
            return params, None
        odd = next((p for p in params if len(p) != 2), None)
        if odd is not None:
            raise InvalidArgumentError(
                f"{type(self).__name__}: a named parameter is a (name, parameter) pair, got "
                f"a tuple of {len(odd)}"
            )
        return [p for _, p in params], [name for name, _ in params]

    def _check_group(self, group: dict[str, Any]) -> None:
        """A group's hyper-parameters checked as torch checks them: numbers, ``lr``,
        ``eps``, ``weight_decay``, ``momentum`` (and Adagrad's ``lr_decay`` and
        ``initial_accumulator_value``, NAdam's ``momentum_decay``) non-negative, ``betas`` a
        pair."""
        name = type(self).__name__
        if not self.steps_itself:  # (an algorithm of the user's own reads its own)
            _refuse_unsupported_switches(name, group)
        for key in (
            "lr", "eps", "weight_decay", "momentum",
            "lr_decay", "initial_accumulator_value", "momentum_decay",
        ):  # fmt: skip
            if key not in group:
                continue
            # Adafactor's eps is a pair (a None first: the dtype's machine epsilon)
            values = group[key] if key == "eps" and isinstance(group[key], tuple) else (group[key],)
            for value in values:
                if value is None and (len(values) > 1 or self.steps_itself):
                    continue
                if isinstance(value, Tensor) and value.numel() == 1:
                    value = value.item()
                if isinstance(value, np.number):  # (a step takes them: see is_number)
                    value = value.item()
                if not isinstance(value, int | float) or isinstance(value, bool):
                    raise DTypeError(f"{name}: {key} must be a number, got {group[key]!r}")
                if not value >= 0.0:
                    raise InvalidArgumentError(
                        f"{name}: {key} must be non-negative, got {group[key]!r}"
                    )
        if "betas" in group:
            betas = group["betas"]
            # an algorithm of the user's own may keep more (Adan's three)
            sizes = range(1, len(betas) + 1) if self.steps_itself else (2,)
            if not (
                isinstance(betas, tuple | list)
                and len(betas) in sizes
                and all(is_number(b) and not isinstance(b, Tensor) for b in betas)
            ):
                kind = "a tuple" if self.steps_itself else "a pair"
                raise DTypeError(f"{name}: betas must be {kind} of numbers, got {betas!r}")

    def check_hyper_parameters(self, op: str) -> None:
        """Every group's hyper-parameters still of their defaults' kinds, asked before a step
        updates anything: a number (or a one-element tensor, torch's tensor ``lr``) where the
        default is a number, a tuple of as many numbers where it is one (``betas``, ``etas``).
        A group's entry set between steps to a str, None or a short tuple (a schedule's or a
        user's typo) failed inside the update, as a bare TypeError or ValueError in most
        algorithms, after the groups before it had been stepped."""
        name = f"{type(self).__name__}.{op}"
        for index, group in enumerate(self.param_groups):
            for key, default in self.defaults.items():
                value = group.get(key, default)
                if not _of_kind(value, default):
                    kind = "a number" if is_number(default) else f"{len(default)} numbers"
                    raise DTypeError(
                        f"{name}: hyper-parameter {key!r} of param_groups[{index}] must be "
                        f"{kind}, got {value!r}"
                    )

    # -- the learning rate of a one-group optimizer, as before -------------------------------
    @property
    def lr(self) -> float:
        """The first group's learning rate; setting it sets every group's."""
        return self.param_groups[0]["lr"]

    @lr.setter
    def lr(self, value: float) -> None:
        for group in self.param_groups:
            group["lr"] = value

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Gradients are the value ``backward()`` returns, fresh at every backward: there is
        nothing to clear. ``set_to_none=False`` keeps torch's meaning where it shows: a
        parameter of these groups that had a gradient keeps a zero one in torch, so a later
        step in which it gets none (unused by the loss, or frozen by ``requires_grad_(False)``)
        still steps it with a zero gradient (momentum, weight decay and Adam's moments move
        it); such parameters are marked here and :meth:`step` steps them so.
        ``set_to_none=True`` (the default) drops the mark, as torch drops ``.grad``."""
        for group in self.param_groups:
            for parameter in group["params"]:
                (forget_gradient if set_to_none else zero_kept_gradient)(parameter)

    def step(self, grads: Any = None, closure: Any = None) -> Any:
        """Update every parameter that has a gradient in ``grads`` (what ``backward()``
        returned); parameters without one are left as they are, as in PyTorch.

        ``step(closure)`` or ``step(closure=closure)``, as in torch: the closure re-evaluates
        the model and returns ``(loss, grads)`` (:mod:`.closure`); the step uses its gradients
        and returns its loss (``closure=None``, torch's default that programs spell out, is no
        closure). torch's ``step()`` without gradients (kept on the parameters there) is
        refused with an error that says what to write instead."""
        if closure is not None:
            if grads is not None:
                raise InvalidArgumentError(
                    f"{type(self).__name__}.step: got both gradients and a closure; pass the "
                    "gradients backward() returned, or a closure that returns (loss, grads)"
                )
            grads = closure
        if callable(grads):
            loss, grads = evaluate_closure(grads, f"{type(self).__name__}.step")
            self.step(grads)
            return loss
        if grads is None:
            raise AutodiffError(
                f"{type(self).__name__}.step: pass the gradients backward() returned, "
                "grads = loss.backward(); optimizer.step(grads) (gradients are a value here, "
                "not kept on the parameters)"
            )
        if not (callable(getattr(grads, "get", None)) and hasattr(grads, "backend")):
            raise DTypeError(
                f"{type(self).__name__}.step: expected the gradients backward() returned "
                f"(grads = loss.backward()), got {type(grads).__name__}"
            )
        self.check_hyper_parameters("step")
        self._check_state_dtypes(grads)
        found: dict[int, set[str]] = {}  # the state keys each parameter had before this step
        # SGD's, Adam's and RMSprop's common case on raw values, the same work (LeanStep)
        lean = LeanStep.of(self, grads)
        for group in self.param_groups:
            for parameter in group["params"]:
                if lean is not None and lean.step(parameter, group):
                    continue
                given = parameter.grad(grads)
                if given is None:
                    # torch's zero gradient kept by zero_grad(set_to_none=False)
                    if not keeps_zero_gradient(parameter):
                        continue
                    value = parameter.inner() if parameter.backend.is_autodiff else parameter
                    grad = zeros_like(value)
                else:
                    mark_gradient_held(parameter)
                    grad = given
                if self.made_in_step:
                    self._forget_made_in_step(parameter, found)
                if grad.backend.is_autodiff:  # backward(create_graph=True): the plain values
                    grad = grad.inner()
                self.step_parameter(parameter, grad, group)
                # The step made the parameter a fresh leaf; ``grads`` keeps its gradient under
                # that leaf too, as torch keeps ``p.grad`` across a step: a second optimizer
                # over the same parameter (the chatbot tutorial's shared embedding), a clip or
                # a log of the gradients after the step still find it.
                if given is not None:
                    parameter.grad_replace(grads, given)

    def lerped_state(self, group: dict[str, Any]) -> tuple[str, ...]:
        """The state entries torch's algorithm updates with ``lerp_`` (Adam's ``exp_avg``),
        which refuses a gradient of another dtype than the entry's: torch's step fails there
        once the model was cast (``model.double()``) after a step made them."""
        return ()

    def _check_state_dtypes(self, grads: Any) -> None:
        """torch's step refused before any parameter moves: a parameter cast to another
        dtype after earlier steps made its state, where torch's ``lerp_`` of that state
        fails (:meth:`lerped_state`). Other state keeps its dtype, as torch's in-place
        updates keep it (:meth:`step_parameter`)."""
        for group in self.param_groups:
            entries = self.lerped_state(group)
            if not entries:
                continue
            for parameter in group["params"]:
                state = self.state.get(parameter)
                if not state:
                    continue
                for key in entries:
                    held = state.get(key)
                    if (
                        isinstance(held, Tensor)
                        and held.dtype != parameter.dtype
                        # (read last: a parameter's gradient is a lookup and a tensor made)
                        and parameter.grad(grads) is not None
                    ):
                        raise DTypeError(
                            f"{type(self).__name__}.step: the state {key!r} of a parameter of "
                            f"shape {list(parameter.shape)} is {held.dtype} but the parameter "
                            f"and its gradient are {parameter.dtype}: the model was cast "
                            "(.double(), .half(), .to(dtype)) after the optimizer stepped, "
                            "which torch's step refuses too (expected dtype for `end`); make "
                            "the optimizer after casting the model"
                        )

    #: The state entries torch's algorithm makes inside its loop over a group's parameters
    #: rather than before it (SGD's momentum buffer, made from the first gradient): a
    #: parameter listed twice finds them, at its second place in a step, as the step found
    #: them -- absent, if they were -- as torch's loop does (it read them all first).
    made_in_step: tuple[str, ...] = ()

    def _forget_made_in_step(self, parameter: Tensor, found: dict[int, set[str]]) -> None:
        """At a parameter's second place in one step, drop the :attr:`made_in_step` entries
        its first place made (``found``: the keys each parameter stepped so far had)."""
        state = self.state.get(parameter)
        had = found.get(id(parameter))
        if had is None:
            found[id(parameter)] = set(state or ())
            return
        for key in self.made_in_step:
            if key not in had and state is not None:
                state.pop(key, None)

    def step_parameter(self, parameter: Tensor, grad: Tensor, group: dict[str, Any]) -> None:
        """One parameter's share of :meth:`step`: ``grad`` (a tensor of the inner backend)
        taken, the state stepped, the new value assigned in place."""
        # asked before any reference of this step's own is made (see sole_reference)
        in_place = self.updates_in_place and sole_reference(parameter, self.state)
        value = parameter.inner() if parameter.backend.is_autodiff else parameter
        state = self.state.get(parameter) or {"step": 0}
        state = {k: _held_as(value, v) for k, v in state.items()}
        before = state
        held_step = state.get("step")
        # the update's arithmetic takes the number
        state["step"] = step_count(held_step, known_count(self, parameter)) + 1
        held_step = self._count_first(parameter, value.backend, held_step, state["step"])
        # an update's inf * 0 is its answer, as torch gives it, not a line the user wrote
        with value.backend.arithmetic_warnings_ignored():
            if value.is_complex():
                new, state = self._complex_update(value, grad, state, group)
            elif in_place:
                new, state = self.update(value, grad, state, group, True)
            else:
                new, state = self.update(value, grad, state, group)
        keep_state(self, parameter, _dtypes_kept(before, state), held_step)
        assign(parameter, new, f"{type(self).__name__}.step")

    def _count_first(self, parameter: Tensor, backend: Any, held_step: Any, count: int) -> Any:
        """The kept state's step count advanced to ``count`` before the update writes the
        moments and the value, as torch's loop advances ``state_steps[i]`` first: an interrupt
        (Ctrl-C) inside one parameter's update then leaves a prefix of torch's sequence (the
        count, then the moments, then the value), never a value and moments stepped beside the
        previous step's count, which the next step's bias correction would read as one step
        fewer (round 67). The count tensor made here is the one :func:`keep_state` keeps (its
        ``step_tensor`` finds it made); the held step unchanged where there is no kept count
        (a first step, or an algorithm that counts none)."""
        held = self.state.get(parameter)
        if not self.counts_steps or not isinstance(held, dict) or "step" not in held:
            return held_step
        if self.counts_steps_as_int:
            held["step"] = count
            return count
        made = step_tensor(count, backend, held_step, known_count(self, parameter))
        note_count(self, parameter, made, count)
        held["step"] = made
        return made

    def _complex_update(
        self, value: Tensor, grad: Tensor, state: State, group: dict[str, Any]
    ) -> tuple[Tensor, State]:
        """:meth:`update` of a complex parameter as torch's optimizers step one: on its
        ``view_as_real`` pairs (Adam's second moment per real and imaginary part), the state's
        buffers kept complex, as torch keeps them."""
        from ..tensor.complexes import view_as_complex, view_as_real

        def pairs(item: Any) -> Any:
            return view_as_real(item) if isinstance(item, Tensor) and item.is_complex() else item

        real_value = pairs(value)
        new, real_state = self.update(
            real_value, pairs(grad), {key: pairs(item) for key, item in state.items()}, group
        )
        state = {
            key: view_as_complex(item)
            if isinstance(item, Tensor) and item.shape == real_value.shape
            else item
            for key, item in real_state.items()
        }
        return view_as_complex(new), state

    #: Whether the state keeps the step count (``state["step"]``), as torch's algorithms do
    #: but SGD: its state is the momentum buffer alone, and none without momentum.
    counts_steps = True

    #: Whether the step count is kept as a Python int, as torch's ``SparseAdam`` keeps it
    #: (``state["step"] += 1`` on an int), not torch's 0-d float tensor of the others.
    counts_steps_as_int = False

    #: Whether :meth:`update` takes a fifth argument, ``in_place`` (the update may write into
    #: the value and state buffers it is given; :meth:`step` passes True only where
    #: :func:`sole_reference` holds).
    updates_in_place = False

    def update(
        self, value: Tensor, grad: Tensor, state: State, group: dict[str, Any]
    ) -> tuple[Tensor, State]:
        raise NotImplementedError

    # -- state dicts ------------------------------------------------------------------------
    def register_state_dict_pre_hook(self, hook: Any, prepend: bool = False) -> RemovableHandle:
        """torch's: ``hook(optimizer)`` runs before :meth:`state_dict` builds the dict."""
        return register_in(self._hook_table("_state_dict_pre_hooks"), hook, prepend)

    def register_state_dict_post_hook(self, hook: Any, prepend: bool = False) -> RemovableHandle:
        """torch's: ``hook(optimizer, state_dict)`` runs on the dict :meth:`state_dict` built;
        a result that is not None replaces it."""
        return register_in(self._hook_table("_state_dict_post_hooks"), hook, prepend)

    def register_load_state_dict_pre_hook(
        self, hook: Any, prepend: bool = False
    ) -> RemovableHandle:
        """torch's: ``hook(optimizer, state_dict)`` runs on a shallow copy of the dict given to
        :meth:`load_state_dict` before anything is read; a result that is not None replaces
        it."""
        return register_in(self._hook_table("_load_state_dict_pre_hooks"), hook, prepend)

    def register_load_state_dict_post_hook(
        self, hook: Any, prepend: bool = False
    ) -> RemovableHandle:
        """torch's: ``hook(optimizer)`` runs once :meth:`load_state_dict` has loaded."""
        return register_in(self._hook_table("_load_state_dict_post_hooks"), hook, prepend)

    def _hooks(self, name: str) -> list[Any]:
        """The hooks of table ``name`` (none registered: no table, and none made by reading)."""
        table = self.__dict__.get(name)
        return list(table.values()) if table else []

    def state_dict(self) -> dict[str, Any]:
        """torch's layout: ``{"state": {index: {...}}, "param_groups": [{..., "params":
        [indices]}]}``, parameters numbered by position across the groups; the state's
        tensors as copies (tensors, as torch's, so that it saves with ``rg.save`` and loads
        with ``weights_only=True``); the state-dict hooks around it."""
        for hook in self._hooks("_state_dict_pre_hooks"):
            hook(self)
        built = self._built_state_dict()
        for hook in self._hooks("_state_dict_post_hooks"):
            result = hook(self, built)
            if result is not None:
                built = result
        return built

    def _built_state_dict(self) -> dict[str, Any]:
        index: dict[int, int] = {}
        groups = []
        start = 0
        for group in self.param_groups:
            # torch's numbering: by place across the groups; a parameter listed twice takes
            # its last place's number (and the next group starts after both places)
            index.update(
                {id(p): k for k, p in enumerate(group["params"], start) if id(p) not in index}
            )
            start += len(group["params"])
            numbers = [index[id(p)] for p in group["params"]]
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": numbers})
        state: dict[Any, Any] = {}
        for key, entry in self.state.items():  # (torch's order: the state's own)
            if not isinstance(key, Tensor):
                # an entry of the optimizer's own beside its parameters' (MADGRAD's step
                # count, ``self.state['k']``): torch's state dict keeps it under its key
                state[key] = _saved(entry)
            elif id(key) in index:
                state[index[id(key)]] = {name: _saved(v) for name, v in entry.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (or torch's, for the same algorithm), matching
        parameters by position in the groups; hyper-parameters come from it too.

        Everything is checked and converted before anything changes: the groups' sizes, their
        hyper-parameters (finite, and accepted as the constructor accepts them), each state's
        parameter number, and every buffer's shape and dtype against its parameter's. A wrong
        entry raises an error naming it and leaves the optimizer as it was. The load hooks run
        around it (the pre-hooks on a shallow copy of ``state_dict``, as torch's).
        """
        pre_hooks = self._hooks("_load_state_dict_pre_hooks")
        if pre_hooks and isinstance(state_dict, Mapping):
            state_dict = dict(state_dict)
            for hook in pre_hooks:
                result = hook(self, state_dict)
                if result is not None:
                    state_dict = result
        self._load_checked(state_dict)
        # torch's load ends in __setstate__, which gives every optimizer's defaults a
        # "differentiable" (False) where it has none (SparseAdam's, LBFGS's): a group added
        # later takes it
        self.defaults.setdefault("differentiable", False)
        for hook in self._hooks("_load_state_dict_post_hooks"):
            hook(self)

    def _load_checked(self, state_dict: Mapping[str, Any]) -> None:
        where = f"{type(self).__name__}.load_state_dict"
        groups = state_dict.get("param_groups") if isinstance(state_dict, Mapping) else None
        saved_state = state_dict.get("state") if isinstance(state_dict, Mapping) else None
        if not isinstance(groups, list | tuple) or not isinstance(saved_state, Mapping):
            raise InvalidArgumentError(
                f"{where}: expected state_dict()'s form, a dict with 'state' (a dict) and "
                f"'param_groups' (a list), got {type(state_dict).__name__}"
            )
        if any(not isinstance(g, Mapping) or "params" not in g for g in groups):
            raise InvalidArgumentError(f"{where}: every parameter group needs 'params'")
        for number, group in enumerate(groups):
            if not isinstance(group["params"], list | tuple):  # (len() of it failed bare)
                raise DTypeError(
                    f"{where}: parameter group {number}'s 'params' must be a list of "
                    f"parameter numbers, got {type(group['params']).__name__}"
                )
        if len(groups) != len(self.param_groups) or any(
            len(saved["params"]) != len(own["params"])
            for saved, own in zip(groups, self.param_groups)
        ):
            # torch's words first (ported code matches them), then the sizes at fault
            said = (
                "loaded state dict has a different number of parameter groups"
                if len(groups) != len(self.param_groups)
                else "loaded state dict contains a parameter group that doesn't match the size "
                "of optimizer's group"
            )
            raise InvalidArgumentError(
                f"{where}: {said}: the saved groups have "
                f"{[len(g['params']) for g in groups]} parameters, this optimizer's "
                f"{[len(g['params']) for g in self.param_groups]}"
            )
        merged = []
        for saved, own in zip(groups, self.param_groups):
            # torch's load takes the saved group whole: an entry only this optimizer's group
            # has (the initial_lr, max_lr... of a schedule made after the save was taken) is
            # dropped; a hyper-parameter the saved group lacks (saved by an older version)
            # keeps this optimizer's value, as torch's __setstate__ sets the defaults
            kept = {k: v for k, v in own.items() if k in self.defaults or k == "param_names"}
            group = {**kept, **{k: v for k, v in saved.items() if k != "params"}}
            _check_finite(where, group)
            # a rate a schedule drove below zero (two chained schedules: CosineAnnealingLR's
            # eta_min pulling a finished PolynomialLR's 0 down) is one this optimizer stepped
            # with and saved: its own state loads back, as torch's does, whose load checks none
            lr = group.get("lr")
            signed = isinstance(lr, int | float) and not isinstance(lr, bool)
            self._check_group({**group, "lr": abs(lr)} if signed else group)
            merged.append(group)
        by_number: dict[int, Tensor] = {}
        for saved, own in zip(groups, self.param_groups):
            for number, p in zip(saved["params"], own["params"]):
                by_number[_parameter_number(where, number)] = p
        group_of = {
            id(p): group for own, group in zip(self.param_groups, merged) for p in own["params"]
        }
        for number, (own, group) in enumerate(zip(self.param_groups, merged)):
            if own["params"]:  # (a group whose state is empty is stepped next too)
                self._checked_probe(
                    where,
                    own["params"][0],
                    group,
                    None,
                    f"the saved settings of group {number} cannot step {type(self).__name__}",
                )
        new_state: dict[Any, Any] = defaultdict(dict)
        for number, entry in saved_state.items():
            if not _numbers_a_parameter(number):
                # the optimizer's own entry (MADGRAD's step count 'k'), loaded back under its
                # key as torch's load does
                new_state[number] = _saved(entry)
                continue
            p = by_number.get(_parameter_number(where, number))
            if p is None:
                raise InvalidArgumentError(
                    f"{where}: state for parameter {number!r}, which no group lists (the "
                    f"groups list {sorted(by_number)})"
                )
            if not isinstance(entry, Mapping):
                raise InvalidArgumentError(
                    f"{where}: the state of parameter {number} is a {type(entry).__name__}, "
                    "not a dict"
                )
            probed = (
                self._checked_probe(
                    where, p, group_of[id(p)], None,
                    f"the saved settings of parameter {number}'s group cannot step "
                    f"{type(self).__name__}",
                )
                if entry
                else {}
            )  # fmt: skip
            for key in [k for k, v in entry.items() if v is None and probed.get(k) is not None]:
                # a buffer saved as None: SGD's momentum_buffer starts afresh, as in torch;
                # where the algorithm's step cannot start it so, it is refused here
                self._checked_probe(
                    where,
                    p,
                    group_of[id(p)],
                    {**probed, **{k: None for k, v in entry.items() if v is None}},
                    f"state {number}/{key} is None, which {type(self).__name__}'s step cannot "
                    "start afresh (a damaged state)",
                )
            missing = sorted(_kept_keys(probed) - set(entry))
            if missing:  # the step would start them afresh beside the saved ones: refused
                raise KeyMismatchError(
                    f"{where}: the state of parameter {number} lacks {missing} (it has "
                    f"{sorted(entry)}); a damaged or another algorithm's state"
                )
            new_state[p] = {}
            for key, v in entry.items():
                try:
                    _check_buffer_given(where, number, key, v, probed.get(key), p)
                    # a buffer (the probe's entry a tensor) is one whatever its rank: a 0-d
                    # parameter's moments, saved as 0-d arrays, were taken for scalars and
                    # its next step failed deep inside
                    new_state[p][key] = (
                        state_tensor(where, number, key, v, p, self.state_shape(key, p.shape))
                        if v is not None and isinstance(probed.get(key), Tensor)
                        else self.load_state_value(where, number, key, v, p)
                    )
                except RetrogradError:
                    raise
                except (RuntimeError, NotImplementedError) as error:
                    # torch's own, reading a tensor without values here (a meta tensor:
                    # "Cannot copy out of meta tensor; no data!")
                    raise DTypeError(
                        f"{where}: state {number}/{key} is a tensor that cannot be read "
                        f"({' '.join(str(error).split())})"
                    ) from None
        for own, group in zip(self.param_groups, merged):
            for key in [k for k in own if k != "params" and k not in group]:
                del own[key]
            own.update({k: v for k, v in group.items() if k != "params"})
        self.state = new_state

    def state_keys(self, parameter: Tensor, group: dict[str, Any]) -> set[str]:
        """The buffers a step keeps in ``parameter``'s state under ``group``'s settings (None
        ones and the step count aside: torch's SGD keeps no count): those one :meth:`update`
        makes for a one-element stand-in of the parameter (same rank, dtype and backend), so
        that the algorithm alone says."""
        return _kept_keys(self._probed_state(parameter, group))

    def _probed_state(
        self, parameter: Tensor, group: dict[str, Any], state: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The state one :meth:`update` makes for a one-element stand-in of ``parameter``
        (same rank, dtype and backend) from ``state`` (a first step's by default): what the
        algorithm keeps, and in what form (a buffer is a tensor of the stand-in's rank, a
        scalar a number or a 0-d tensor)."""
        if type(self).update is Optimizer.update:  # no per-parameter update (L-BFGS)
            return {}
        value = parameter.inner() if parameter.backend.is_autodiff else parameter
        probe = value.new_zeros((1,) * value.ndim)
        if probe.is_complex():  # (stepped on its real pairs: a real parameter's buffers)
            probe = probe.real
        with probe.backend.arithmetic_warnings_ignored():
            _, made = self.update(probe, probe, {"step": 1} if state is None else state, group)
        return dict(made)

    def _checked_probe(
        self, where: str, parameter: Tensor, group: dict[str, Any], state: dict[str, Any] | None,
        what: str,
    ) -> dict[str, Any]:  # fmt: skip
        """:meth:`_probed_state`, a saved group or state this algorithm cannot step with (a
        setting saved as None or as a pair of another length, a moment saved as None where
        the step needs it) refused at the load naming ``what``, rather than failing bare
        inside the next step."""
        try:
            return self._probed_state(parameter, group, state)
        except RetrogradError:  # the step's own check, which names the op and the value
            raise
        except (TypeError, AttributeError) as error:
            raise DTypeError(f"{where}: {what} ({type(error).__name__}: {error})") from None
        except (ValueError, ArithmeticError, LookupError) as error:
            raise InvalidArgumentError(
                f"{where}: {what} ({type(error).__name__}: {error})"
            ) from None

    def load_state_value(
        self, where: str, number: int, key: str, value: Any, parameter: Tensor
    ) -> Any:
        """A saved state entry ``key`` of ``parameter`` (numbered ``number``) as this
        optimizer keeps it, checked against :meth:`state_shape` (an algorithm whose state is
        not one buffer per parameter, L-BFGS's, says how its entries are read)."""
        if self.steps_itself:
            return _kept_as_saved(value, parameter, key)
        if key == "step" and self.counts_steps_as_int:
            return state_count(where, number, key, value)
        return _state_value(
            where, number, key, value, parameter, self.state_shape(key, parameter.shape)
        )

    def state_shape(self, key: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape of the state buffer ``key`` of a parameter of ``shape``: the
        parameter's own, unless an algorithm keeps a buffer of another shape (Adafactor's
        factored statistics), which ``load_state_dict`` then checks against."""
        return tuple(shape)

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for number, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {number}")
            for key in sorted(k for k in group if k != "params"):
                lines.append(f"    {key}: {group[key]}")
        return "\n".join([*lines, ")"])


def keep_state(
    optimizer: Optimizer, parameter: Tensor, state: State, held_step: Any = None
) -> None:
    """``state`` kept as ``parameter``'s after a step: without the step count where the
    algorithm keeps none (:attr:`Optimizer.counts_steps`), the count otherwise in torch's form
    (:func:`step_tensor`, made from ``held_step``, the count the step found), and no entry
    where nothing is left (torch's ``optimizer.state`` of SGD without momentum is empty)."""
    if not optimizer.counts_steps:
        state.pop("step", None)
    elif optimizer.counts_steps_as_int and "step" in state:
        state["step"] = step_count(state["step"])
    elif isinstance(state.get("step"), int | float):
        count = int(state["step"])
        backend = parameter._backend
        known = known_count(optimizer, parameter)
        state["step"] = step_tensor(
            count, backend.inner if backend.is_autodiff else backend, held_step, known
        )
        note_count(optimizer, parameter, state["step"], count)
    _keep_buffer_objects(optimizer.state.get(parameter), state)
    if state:
        optimizer.state[parameter] = state
    else:
        optimizer.state.pop(parameter, None)
    counts = optimizer.__dict__.get("_step_counts")
    if counts is not None and len(counts) > len(optimizer.state):
        # a state was dropped (``del optimizer.state[p]``, a param group removed with it):
        # the table lets that parameter and its last step tensor go too
        for gone in [p for p in counts if p not in optimizer.state]:
            del counts[gone]


Optimizer.step = hooked_step(Optimizer.step)


def _keep_buffer_objects(held: State | None, state: State) -> None:
    """Each buffer of ``state`` (the step's new one) that replaces a tensor of the same
    backend, shape and dtype in ``held`` (the state the step found) written into that tensor,
    which ``state`` then keeps: torch updates its buffers in place, so that a buffer read from
    ``optimizer.state[p]`` before a step (``m = state["exp_avg"]``) shows every later step's
    values, as ``np.asarray(m)`` does. A step that wrote in place gives the same object back,
    and a buffer that changes kind (a user's tensor of another backend) is kept as new."""
    if not held:
        return
    for key, new in state.items():
        old = held.get(key)
        if (
            key != "step"  # (a new count every step; its tensor is another story)
            and isinstance(old, Tensor)
            and isinstance(new, Tensor)
            and old is not new
            and old.backend is new.backend
            and old.dtype == new.dtype
            and tuple(old.shape) == tuple(new.shape)
            and not old.requires_grad
        ):
            # (a buffer written in place holds the same primitive: nothing to write)
            state[key] = old if old._prim is new._prim else assign(old, new, "Optimizer.step")


def note_count(optimizer: Optimizer, parameter: Tensor, step: Tensor, count: int) -> None:
    """``count`` noted beside the step tensor ``step`` that holds it (:func:`known_count`):
    the next step reads no value back."""
    optimizer.__dict__.setdefault("_step_counts", {})[parameter] = (step, count)


def known_count(optimizer: Optimizer, parameter: Tensor) -> tuple[Tensor, int] | None:
    """The step tensor the optimizer last made for ``parameter`` and the count it holds."""
    counts = optimizer.__dict__.get("_step_counts")
    return None if counts is None else counts.get(parameter)


def step_count(held: Any, known: tuple[Tensor, int] | None = None) -> int:
    """The number of steps a state's ``"step"`` holds: torch's 0-d float tensor (``known``:
    the tensor a step made and its count, read without a device read while it is still the
    one held), or a number (an older state dict's int, one a user set; absent: none)."""
    if held is None:
        return 0
    if isinstance(held, Tensor):
        if known is not None and known[0] is held:
            return known[1]
        held = held.item()
    return int(held)


def step_tensor(
    count: int, backend: Any, held: Any = None, known: tuple[Tensor, int] | None = None
) -> Tensor:
    """A state's step count as torch keeps it: a 0-d floating tensor on ``backend``'s CPU
    (``.item()``, ``int()`` and arithmetic read it), float32 -- float64 under a float64
    default dtype, as torch's ``_get_scalar_dtype`` -- or the floating dtype of ``held``, the
    count it replaces (torch adds one to its step in place; a loaded step keeps its dtype)."""
    if known is not None and known[0] is held and known[1] == count:
        return held  # made already (Optimizer._count_first)
    if (
        type(held) is Tensor
        and held._backend is backend
        and held._view is None
        and not held._inference
        and backend.dtype(held._prim) in ("float32", "float64")
    ):
        # ``held + delta`` on the raw value, the backend's own add (what the tensor's ``+``
        # dispatches to): the tensor layer's dispatch cost more than the rest of a small
        # parameter's step
        delta = float(count - step_count(held, known))
        return Tensor(backend.add_scalar(held._prim, delta), backend, held._device)
    dtype = _floating_dtype_of(held)
    if isinstance(held, Tensor) and dtype is not None and held.backend is backend:
        # the next count made from the last on its device, as torch's ``step += 1``: a step
        # sends no value to the device
        return held + (count - step_count(held, known))
    if dtype is None:
        dtype = "float64" if default_float_dtype() == "float64" else "float32"
    return tensor(float(count), dtype=dtype, backend=backend, device="cpu")


def _floating_dtype_of(held: Any) -> str | None:
    """The dtype name of a float32/float64 tensor or array (retrograd's, NumPy's, torch's)."""
    dtype = getattr(held, "dtype", None)
    name = str(dtype).rsplit(".", 1)[-1] if dtype is not None else None
    return name if name in ("float32", "float64") else None


def _sole_tensor(t: Tensor) -> bool:
    """``t``'s primitive held only by ``t``, and (on an autodiff backend) its inner value only
    by that primitive, whose memory no other array or tensor shares (``Backend.owns_memory``)."""
    backend = t.backend
    if _count(t.primitive) > _HELD_ONCE:
        return False
    if backend.is_autodiff:
        if _count(backend.inner_value(t.primitive)) > _HELD_ONCE:
            return False
        return backend.inner.owns_memory(backend.inner_value(t.primitive))
    return backend.owns_memory(t.primitive)


def _dtypes_kept(before: State, after: State) -> State:
    """``after``, a step's new state, with each floating tensor the step found in ``before``
    kept in that tensor's dtype: torch updates its state in place (``buf.mul_(m).add_(g)``),
    so a float32 momentum buffer stays float32 after ``model.double()``."""
    for key, old in before.items():
        new = after.get(key)
        if (
            key != "step"
            and isinstance(old, Tensor)
            and isinstance(new, Tensor)
            and new.dtype != old.dtype
            and new.is_floating_point()
            and old.is_floating_point()
            and tuple(new.shape) == tuple(old.shape)
        ):
            after[key] = new.cast(old.dtype)
    return after


def _held_as(value: Tensor, buffer: Any) -> Any:
    """A state buffer as the update takes it: on ``value``'s (inner) backend. A tensor the
    user wrote into ``optimizer.state[p]`` in torch's way (Lookahead's
    ``state[p]["momentum_buffer"] = torch.zeros_like(p.data)``) is one of the parameter's own
    backend: its values, without graph."""
    if (
        isinstance(buffer, Tensor)
        and buffer.backend is not value.backend
        and buffer.backend.is_autodiff
        and buffer.backend.inner is value.backend
    ):
        return buffer.inner()
    return buffer


def sole_reference(parameter: Tensor, states: Mapping[Tensor, State]) -> bool:
    """Whether an optimizer step may write ``parameter``'s new value and state into their
    buffers: nothing but the parameter references its value, and nothing but the optimizer's
    ``states[parameter]`` its state (the dict, each tensor in it and its value).

    Python's reference counts decide: a graph that saved the value, a detached alias, a view,
    a NumPy array over the memory, a kept state dict or buffer each add one, and the backend
    says whether another array or tensor shares the memory (NumPy views and torch tensors over
    one storage hold no Python reference to each other). Called before the step makes any
    reference of its own. The parameter object itself may be held anywhere: it stays what it
    is and shows the new value.
    """
    if not _sole_tensor(parameter):
        return False
    if states.get(parameter) is None:
        return True
    if _count(states.get(parameter)) > _HELD_ONCE:
        return False
    entry = states[parameter]
    for key in entry:
        if key == "step":  # a new count every step, never written in place
            continue
        if isinstance(entry[key], Tensor) and (
            _count(entry[key]) > _HELD_ONCE or not _sole_tensor(entry[key])
        ):
            return False
    return True


def _numpy_number(value: Any) -> bool:
    """A NumPy real number: a scalar (``np.float32(0.1)``) or a 0-d array, not a bool."""
    return (
        isinstance(value, np.number | np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf"
    )


def is_number(value: Any) -> bool:
    """A hyper-parameter's number: an int or float (not a bool), or a one-element tensor."""
    if isinstance(value, Tensor):
        return value.numel() == 1
    return isinstance(value, int | float | np.number) and not isinstance(value, bool | np.bool_)


def _of_kind(value: Any, default: Any) -> bool:
    """Whether a group's ``value`` is of its ``default``'s kind: a number where that is one, a
    tuple of as many numbers where that is one of numbers (Adafactor's ``eps`` is
    ``(None, 1e-3)``: None stands for the dtype's epsilon), anything where it is not."""
    if is_number(default):
        return is_number(value)
    if not (isinstance(default, tuple) and any(map(is_number, default))):
        return True
    return (
        isinstance(value, tuple | list)
        and len(value) == len(default)
        and all(is_number(v) or (d is None and v is None) for v, d in zip(value, default))
    )


def _check_finite(where: str, group: Mapping[str, Any]) -> None:
    """Every number among a group's hyper-parameters (``betas``' too) is finite."""
    for key, value in group.items():
        values = value if isinstance(value, list | tuple) and key != "params" else [value]
        for number in values:
            numeric = isinstance(number, int | float) and not isinstance(number, bool)
            if numeric and not math.isfinite(number):
                raise InvalidArgumentError(f"{where}: {key} must be finite, got {value!r}")


def _numbers_a_parameter(key: Any) -> bool:
    """Whether a key of a saved ``state`` numbers a parameter (an integer, or its digits as a
    string, as a JSON round trip leaves it) rather than naming an entry of the optimizer's
    own, which torch's state dicts keep beside the parameters' (``self.state['k']``)."""
    if isinstance(key, str):
        return key.strip().lstrip("+-").isdigit()
    try:
        operator.index(key)
    except TypeError:
        return False
    return True


def _parameter_number(where: str, number: Any) -> int:
    try:
        return operator.index(number) if not isinstance(number, str) else int(number)
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            f"{where}: parameters are numbered by integers, got {number!r}"
        ) from None


def _state_value(
    where: str, number: int, key: str, value: Any, parameter: Tensor, shape: tuple[int, ...]
) -> Any:
    """A saved state entry as the optimizer keeps it: the step an int, a buffer a tensor of
    ``shape`` (the parameter's, as a rule) in the parameter's dtype, backend and device; a
    Python scalar as it is."""
    if key == "step":  # torch's 0-d tensor, whatever number the dict holds
        inner = parameter.inner() if parameter.backend.is_autodiff else parameter
        return step_tensor(state_count(where, number, key, value), inner.backend, value)
    if np.ndim(_array(value)) == 0 and not (isinstance(value, Tensor) and shape == ()):
        # torch keeps some scalars of the state in 0-d tensors (ASGD's eta and mu, NAdam's
        # mu_product; retrograd's 0-d tensors when rg.load read them from torch's file: a
        # 0-d tensor is a buffer only of a 0-d parameter): here they are Python numbers,
        # until a load, which casts them to a
        # floating parameter's dtype as torch's does: a NumPy scalar of that dtype (NAdam
        # computes its product in torch's scalar dtype whatever it is: see NAdam.update)
        scalar = np.asarray(_array(value))
        if value is not None and scalar.dtype.kind not in "biufc":
            # a str or an object kept as the state failed at the next step, deep inside
            raise DTypeError(
                f"{where}: state {number}/{key} must be a tensor or a number, got {value!r}"
            )
        held = _HELD_SCALARS.get(str(parameter.dtype))
        if held is not None and scalar.dtype.kind in "iuf":
            return held(scalar)
        return scalar.item()
    return state_tensor(where, number, key, value, parameter, shape)


#: the NumPy scalar types that hold a loaded 0-d state entry of a parameter of each dtype
_HELD_SCALARS = {"float16": np.float16, "float32": np.float32, "float64": np.float64}


def _kept_keys(probed: dict[str, Any]) -> set[str]:
    """The entries of a probed state (:meth:`Optimizer._probed_state`) a saved state must
    hold: not None, and not the step count."""
    return {key for key, entry in probed.items() if entry is not None and key != "step"}


def _check_buffer_given(
    where: str, number: int, key: str, value: Any, probed: Any, parameter: Tensor
) -> None:
    """Refuse a single value (a number, a str, a 0-d tensor) saved for ``key``, which the
    algorithm keeps as a buffer of ``parameter``'s rank (``probed``: the probe's entry, a
    tensor of rank > 0): it was kept as a scalar, and the next step failed deep inside with
    an AttributeError. ``None`` stays allowed (torch's SGD saves ``momentum_buffer: None``,
    and a step starts the buffer afresh)."""
    if value is None or not isinstance(probed, Tensor) or probed.ndim == 0:
        return
    if np.ndim(_array(value)) != 0:
        return
    numeric = isinstance(value, int | float | complex | np.generic | Tensor)
    raise (ShapeError if numeric else DTypeError)(
        f"{where}: state {number}/{key} must be a tensor of its parameter's shape "
        f"{list(parameter.shape)}, got {value!r}"
    )


def _kept_as_saved(value: Any, parameter: Tensor, key: str) -> Any:
    """A saved state entry of an optimizer whose step is its own, as torch's load keeps it: a
    tensor (saved as an array) a tensor again, floating buffers in the parameter's dtype (the
    step in its own: Sophia's 0-d float step stays one), anything else as it was saved."""
    if not (isinstance(value, Tensor | np.ndarray) or callable(getattr(value, "detach", None))):
        return value
    array = np.array(_array(value), copy=True)
    inner = parameter.inner() if parameter.backend.is_autodiff else parameter
    floating = array.dtype.kind == "f" and key != "step"
    dtype = inner.dtype if floating else None
    return tensor(array, dtype=dtype, backend=inner.backend, device=inner.device)


def state_count(where: str, number: int, key: str, value: Any) -> int:
    """A saved count of the state (the step, L-BFGS's evaluations) as an int."""
    count = np.asarray(_array(value))
    if count.ndim or count.dtype.kind not in "iuf" or not (np.isfinite(count) and count >= 0):
        what = f"the step of parameter {number}" if key == "step" else f"state {number}/{key}"
        raise InvalidArgumentError(f"{where}: {what} must be a count, got {value!r}")
    return int(count)


def state_tensor(
    where: str, number: int, key: str, value: Any, parameter: Tensor, shape: tuple[int, ...]
) -> Tensor:
    """A saved buffer of the state as a tensor of ``shape`` in ``parameter``'s dtype, backend
    and device."""
    array = np.asarray(_array(value))
    # a complex parameter's buffers are complex (torch's: Adam's moments of a complex
    # parameter are complex tensors); a real parameter's never are
    kinds = "biufc" if parameter.is_complex() else "biuf"
    if array.dtype.kind not in kinds:
        raise DTypeError(
            f"{where}: state {number}/{key} holds {array.dtype} values, its parameter is "
            f"{parameter.dtype}"
        )
    if tuple(array.shape) != shape:
        expected = "" if shape == tuple(parameter.shape) else f" (a state of shape {list(shape)})"
        raise ShapeError(
            f"{where}: state {number}/{key} has shape {list(array.shape)}, its parameter "
            f"{list(parameter.shape)}{expected}"
        )
    inner = parameter.inner() if parameter.backend.is_autodiff else parameter
    return tensor(
        cast_host(array, inner.dtype), dtype=inner.dtype, backend=inner.backend, device=inner.device
    )


def _saved(value: Any) -> Any:
    """A state entry as ``state_dict`` gives it: tensors as tensors (torch's state dict holds
    tensors, which ``torch.save``/``rg.save`` and a ``weights_only`` load take), copies of
    them, as are lists and tuples of them (L-BFGS's history), so that later steps change
    nothing in it."""
    if isinstance(value, Tensor):
        # the state's value in a tensor object of its own, sharing its memory, as torch's
        # state dict holds the state's own tensors: a step gives a state entry a new value
        # (writing one in place only where nothing else holds it), so later steps change
        # nothing in it. (``clone`` copies since round 94: an allocation per entry per save.)
        return type(value)._result(value._prim, value._backend, value._device)
    if isinstance(value, list | tuple):
        return type(value)(_saved(v) for v in value)
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        # a loaded 0-d entry (NAdam's mu_product, :data:`_HELD_SCALARS`) as the number it is:
        # a NumPy scalar in a saved file is refused by torch's weights_only load (and ours)
        return value.item()
    return value


def _array(value: Any) -> Any:
    detach = getattr(value, "detach", None)  # a torch tensor in a torch state dict
    if callable(detach) and not isinstance(value, Tensor):
        host = detach().cpu()
        if str(host.dtype) == "torch.bfloat16":  # NumPy has none ("unsupported ScalarType")
            host = host.float()  # widened exactly; cast to the parameter's dtype on loading
        return host.numpy()
    return np.asarray(value) if isinstance(value, Tensor) else value


class FusedOptimizer(Optimizer):
    """An optimizer whose update is one fused backend kernel per parameter (:attr:`fused`),
    written in place where :func:`sole_reference` allows; a captured step's replay calls the
    same kernel directly (:class:`~.bound.BoundStep`)."""

    #: the kernel's calling convention (:mod:`.fused`)
    fused: FusedUpdate

    updates_in_place = True

    def settings(self, group: dict[str, Any]) -> dict[str, Any]:
        """The kernel's settings (its hyper-parameters by name) for a parameter group."""
        return {name: group[name] for name in self.fused.hyper if name != "step"}

    def update(self, value, grad, state, group, in_place=False):
        if group.get("maximize"):
            grad = -grad  # torch negates the gradient first, then decays and steps as usual
        if group.get("amsgrad"):
            return self.amsgrad_update(value, grad, state, group)
        return self.fused.run(value, grad, state, self.settings(group), in_place)

    def amsgrad_update(self, value, grad, state, group):
        raise NotImplementedError

    def bypasses_kernel(self) -> bool:
        """Whether a group asks for what the fused kernel alone does not do (``maximize``,
        ``amsgrad``): a captured step then runs :meth:`update` rather than the bare kernel."""
        return any(group.get("maximize") or group.get("amsgrad") for group in self.param_groups)


#: torch 2.13's implementation switches, with their defaults: ``foreach``/``fused`` (how
#: torch loops over the parameters, one kernel per list or per step) and ``capturable``/
#: ``differentiable`` (a CUDA-graph-safe step, a step autograd records)
SWITCH_DEFAULTS: dict[str, Any] = {
    "foreach": None,
    "fused": None,
    "capturable": False,
    "differentiable": False,
}


def implementation_switches(name: str, flags: dict[str, Any], taken: tuple[str, ...]) -> dict:
    """The switches of ``taken`` (those torch's constructor of ``name`` takes) as given in
    ``flags``, torch's defaults for those not given: group settings, as torch's. Here one
    algorithm runs whatever they say, with the same numbers (torch 2.13 runs ``fused`` on
    the CPU too, as its own kernels); ``capturable``/``differentiable`` are refused when
    asked for, ``fused`` with ``foreach`` as torch refuses it, and a keyword torch's
    constructor does not take (``RMSprop(fused=True)``) by name."""
    unknown = sorted(set(flags) - set(taken))
    if unknown:
        raise InvalidArgumentError(f"{name}: unexpected keyword arguments {unknown}")
    switches = {key: flags.get(key, SWITCH_DEFAULTS[key]) for key in taken}
    if switches.get("fused") and switches.get("foreach"):
        raise InvalidArgumentError(f"{name}: `fused` and `foreach` cannot be `True` together.")
    _refuse_unsupported_switches(name, switches)
    return switches


def _refuse_unsupported_switches(name: str, group: Mapping[str, Any]) -> None:
    refused = sorted(key for key in ("capturable", "differentiable") if group.get(key))
    if refused:
        raise InvalidArgumentError(
            f"{name}: {refused} are not supported (retrograd's steps are neither captured in "
            "CUDA graphs nor recorded by autodiff); leave them False"
        )


class SGD(FusedOptimizer):
    """Stochastic gradient descent with momentum, Nesterov momentum and weight decay, as
    ``torch.optim.SGD`` (:func:`sgd_update`).

    >>> import retrograd as rg
    >>> from retrograd import nn, optim
    >>> model = nn.Linear(2, 1)
    >>> grads = model(rg.ones((1, 2))).sum().backward()
    >>> optim.SGD(model.parameters(), lr=0.1, momentum=0.9).step(grads)
    """

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        **flags: Any,
    ):
        switches = implementation_switches("SGD", flags, ("foreach", "differentiable", "fused"))
        defaults = {
            "lr": lr,
            "momentum": float(momentum),
            "dampening": float(dampening),
            "weight_decay": float(weight_decay),
            "nesterov": bool(nesterov),
            "maximize": bool(maximize),
            **switches,
        }
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        if group["nesterov"] and (group["momentum"] <= 0.0 or group["dampening"] != 0.0):
            raise InvalidArgumentError(
                "SGD: Nesterov momentum requires a momentum and zero dampening"
            )

    fused = SGD_MOMENTUM
    made_in_step = ("momentum_buffer",)
    counts_steps = False


class Adam(FusedOptimizer):
    """Adam (Kingma & Ba), L2 weight decay added to the gradient, as ``torch.optim.Adam``
    (:func:`adam_update`)."""

    decoupled = False

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        decoupled_weight_decay: bool = False,
        **flags: Any,
    ):
        switches = implementation_switches(
            type(self).__name__, flags, ("foreach", "capturable", "differentiable", "fused")
        )
        if isinstance(lr, Tensor):  # torch's checks of a tensor lr
            if switches["foreach"] and not switches["capturable"]:
                raise InvalidArgumentError(
                    f"{type(self).__name__}: lr as a Tensor is not supported for "
                    "capturable=False and foreach=True"
                )
            if lr.numel() != 1:
                raise InvalidArgumentError(
                    f"{type(self).__name__}: Tensor lr must be 1-element, got shape "
                    f"{list(lr.shape)}"
                )
        defaults = {
            "lr": lr,
            "betas": (float(betas[0]), float(betas[1])),
            "eps": float(eps),
            "weight_decay": float(weight_decay),
            "amsgrad": bool(amsgrad),
            "maximize": bool(maximize),
            **switches,
            # a group's own, as torch's (Adam(decoupled_weight_decay=True) is AdamW)
            "decoupled_weight_decay": bool(decoupled_weight_decay or self.decoupled),
        }
        super().__init__(params, defaults)

    def _decoupled(self, group: dict[str, Any]) -> bool:
        """The group's ``decoupled_weight_decay`` (a group loaded from a state dict saved
        without it: the class's)."""
        return bool(group.get("decoupled_weight_decay", self.decoupled))

    def amsgrad_update(self, value: Tensor, grad: Tensor, state: State, group: dict) -> tuple:
        """torch's single-tensor Adam with ``amsgrad``, operation for operation: the
        denominator uses the running maximum of the second moment (``max_exp_avg_sq``)."""
        state = dict(state)
        beta1, beta2 = group["betas"]
        lr, step, weight_decay = group["lr"], state["step"], group["weight_decay"]
        if weight_decay:
            if self._decoupled(group):
                value = value * (1.0 - lr * weight_decay)
            else:
                grad = grad.add(value, alpha=weight_decay)
        # each moment saved as None starts afresh alone, as the fused kernel's do (a state
        # whose exp_avg_sq alone was None failed here with a bare TypeError)
        first, second = state.get("exp_avg"), state.get("exp_avg_sq")
        if first is None:
            first = zeros_like(grad)
        if second is None:
            second = zeros_like(grad)
        peak = state.get("max_exp_avg_sq")
        if peak is None:
            peak = zeros_like(grad)
        first = first.lerp(grad, 1.0 - beta1)
        second = (second * beta2).addcmul(grad, grad, value=1.0 - beta2)
        step_size = lr / (1.0 - beta1**step)
        peak = peak.maximum(second)
        denom = peak.sqrt() / ((1.0 - beta2**step) ** 0.5) + group["eps"]
        value = value.addcdiv(first, denom, value=-step_size)
        state.update(exp_avg=first, exp_avg_sq=second, max_exp_avg_sq=peak)
        return value, state

    def lerped_state(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("exp_avg",)  # torch's exp_avg.lerp_(grad, 1 - beta1)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        beta1, beta2 = group["betas"]
        if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
            raise InvalidArgumentError(
                f"{type(self).__name__}: betas must be in [0, 1), got {group['betas']!r}"
            )

    fused = ADAM

    def settings(self, group: dict[str, Any]) -> dict[str, Any]:
        beta1, beta2 = group["betas"]
        return {
            "lr": group["lr"],
            "beta1": beta1,
            "beta2": beta2,
            "eps": group["eps"],
            "weight_decay": group["weight_decay"],
            "decoupled": self._decoupled(group),
        }


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter), as ``torch.optim.AdamW``: each
    parameter is first scaled by ``1 - lr * weight_decay`` (its group's), then takes the Adam
    step. GPT training decays 2-d weights only, with two groups::

        optimizer = optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": no_decay, "weight_decay": 0.0}], lr=3e-4)
    """

    decoupled = True

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        **flags: Any,
    ):
        flags.pop("decoupled_weight_decay", None)  # AdamW's is always on
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize, **flags)


class RMSprop(FusedOptimizer):
    """RMSprop (Hinton), as ``torch.optim.RMSprop`` (:func:`rmsprop_update`), with momentum,
    the centered variant and L2 weight decay."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        *,
        maximize: bool = False,
        **flags: Any,
    ):
        switches = implementation_switches(
            "RMSprop", flags, ("capturable", "foreach", "differentiable")
        )
        if not alpha >= 0.0:
            raise InvalidArgumentError(f"RMSprop: alpha must be non-negative, got {alpha!r}")
        defaults = {  # torch's order
            "lr": lr,
            "momentum": float(momentum),
            "alpha": float(alpha),
            "eps": float(eps),
            "centered": bool(centered),
            "weight_decay": float(weight_decay),
            "capturable": switches["capturable"],
            "foreach": switches["foreach"],
            "maximize": bool(maximize),
            "differentiable": switches["differentiable"],
        }
        super().__init__(params, defaults)

    def lerped_state(self, group: dict[str, Any]) -> tuple[str, ...]:
        # torch's centered form: grad_avg.lerp_(grad, 1 - alpha)
        return ("grad_avg",) if group.get("centered") else ()

    fused = RMSPROP


class LeanStep:
    """The eager step of SGD, Adam(W) and RMSprop without the tensor layer, for the common case.

    :meth:`Optimizer.step` steps each parameter through :meth:`Optimizer.step_parameter`: the
    gradient read as a tensor, the state's buffers rewrapped, the fused kernel called through the
    tensor layer's dispatch, the new value assigned through :func:`~retrograd.tensor.inplace.
    assign`. On a small model that Python, about ten tensor objects and a dozen checks per
    parameter, cost more than the kernels: the small GPT's AdamW step ran 1.8x (NumPy) and 2.3x
    (torch backend) torch's own single-tensor loop.

    :class:`LeanStep` does the same work on the inner backend's raw values, for a parameter whose
    step holds nothing the eager path's general machinery is there for: an autodiff leaf of one
    real dtype with a plain gradient of its shape, no views, not an inference tensor, no
    distributed mark, its state made by an earlier step (the kernel's buffers of the value's
    dtype on its backend, and nothing else), and written in place (:func:`sole_reference`).
    Anything else takes the eager path, parameter by parameter. What it keeps from the eager
    step, in the same order: the gradient found under the leaf's former keys too, the held mark,
    the count advanced before the moments, the kernel's in-place write, the state kept as a new
    dict with the same buffer objects, the parameter made a fresh leaf (the old one remembered,
    the write counted and captured), and the gradient kept under the new leaf. So the bits, the
    state, the gradients and the leaves are the eager step's (tests/test_optim90_lean_step.py).
    """

    __slots__ = ("empties", "grads", "kernel", "optimizer", "settings_of")

    def __init__(self, optimizer: Any, kernel: FusedUpdate, grads: Any):
        self.optimizer, self.kernel, self.grads = optimizer, kernel, grads
        self.settings_of: dict[int, tuple] = {}
        self.empties: dict[tuple, Any] = {}

    @staticmethod
    def of(optimizer: Any, grads: Any) -> LeanStep | None:
        """The lean path of ``optimizer.step(grads)``, or ``None`` where every parameter takes
        the eager one: another algorithm than a fused one's bare kernel (a subclass's own
        ``update`` or ``step_parameter``, ``maximize``, ``amsgrad``), or a parameter listed
        twice (stepped at each place, SGD's buffer forgotten between)."""
        cls = type(optimizer)
        if not isinstance(optimizer, FusedOptimizer) or not optimizer.updates_in_place:
            return None
        if cls.update is not FusedOptimizer.update or cls.step_parameter is not (
            Optimizer.step_parameter
        ):
            return None
        if optimizer.bypasses_kernel():
            return None
        count = 0
        listed = set()
        for group in optimizer.param_groups:
            params = group["params"]
            count += len(params)
            listed.update(map(id, params))
        if len(listed) != count:
            return None
        return LeanStep(optimizer, optimizer.fused, grads)

    def _hyper(self, group: dict[str, Any]) -> tuple:
        """``(hyper-parameters, the step's place among them, the buffers' keys (None: not
        used), how many are used)`` of a group, read once per step (a schedule's ``lr`` set
        between steps is read at the next)."""
        entry = self.settings_of.get(id(group))
        if entry is None:
            settings = self.optimizer.settings(group)
            hyper = list(self.kernel.hyper_values(settings, {"step": 0}))
            place = self.kernel.hyper.index("step") if "step" in self.kernel.hyper else -1
            used = tuple(b.key if b.used else None for b in self.kernel.buffers(settings))
            kept = len(used) - used.count(None)
            entry = self.settings_of[id(group)] = (hyper, place, used, kept)
        return entry

    def step(self, parameter: Tensor, group: dict[str, Any]) -> bool:
        """Step ``parameter`` the lean way; ``False`` where it must take the eager path
        (nothing changed then but, where the leaf had former keys, their gradients merged
        under one, as the eager step's read merges them)."""
        backend = parameter._backend
        if not backend.is_autodiff or parameter._inference:
            return False
        if parameter._view is not None or parameter._views:
            return False
        grads = self.grads
        inner = backend.inner
        if grads.backend is not inner:  # (create_graph: gradients with graphs of their own)
            return False
        node = parameter._prim.node
        if node is None or node.op is not None or node.distributed is not None:
            return False
        grad = backend.grad(parameter._prim, grads)
        if parameter._former_keys:
            key = backend.grad_key(parameter._prim)
            _, grad = parameter._merged_grad(grads, key, grad, parameter._former_keys)
        if grad is None:
            return False  # (the eager path skips it, or steps a kept zero gradient)
        optimizer = self.optimizer
        states = optimizer.state
        counts = optimizer.counts_steps
        if counts and not states.get(parameter):
            return False  # a first step makes the state
        # asked before this step holds the value or the state (see sole_reference)
        if not sole_reference(parameter, states):
            return False
        state = states.get(parameter) or {}
        hyper, place, used, kept = self._hyper(group)
        if len(state) != kept + counts or (counts and "step" not in state):
            return False
        value = parameter._prim.value
        dtype = value.dtype
        if grad.shape != value.shape or (grad.dtype is not dtype and grad.dtype != dtype):
            return False
        if inner.dtype(value) not in _REAL_FLOATS:
            return False
        olds: list[Any] = []
        raws: list[Any] = []
        for key in used:
            if key is None:
                olds.append(None)
                raws.append(self._empty(inner, value, parameter))
                continue
            old = state.get(key)
            if type(old) is not Tensor or old._backend is not inner or old._view is not None:
                return False  # (absent: SGD's first momentum step starts it, the eager way)
            raw = old._prim
            if raw.shape != value.shape or (raw.dtype is not dtype and raw.dtype != dtype):
                return False
            olds.append(old)
            raws.append(raw)
        mark_gradient_held(parameter)
        held_step = state.get("step")
        count = step_count(held_step, known_count(optimizer, parameter)) + 1
        held_step = optimizer._count_first(parameter, inner, held_step, count)
        if place >= 0:
            hyper[place] = count
        with inner.arithmetic_warnings_ignored():
            new, *news = getattr(inner, self.kernel.kernel)(value, grad, *raws, *hyper, True)
        new_state = dict(state)
        new_state["step"] = count
        device = parameter._device
        for key, old, raw in zip(used, olds, news):
            if key is not None:
                new_state[key] = old if raw is old._prim else Tensor(raw, inner, device)
        keep_state(optimizer, parameter, new_state, held_step)
        if new is not value:  # (a kernel that made a new array: the eager assignment)
            assign(parameter, Tensor(new, inner, device), f"{type(optimizer).__name__}.step")
        else:
            old_prim = parameter._prim
            WRITES.note()
            writes = captured_writes.get()
            if writes is not None:
                writes.append((parameter, old_prim))
            remember_leaf(parameter, old_prim)
            parameter._prim = backend.succeed_leaf(old_prim, backend.wrap(new))
        # the gradient kept under the fresh leaf, as torch keeps ``p.grad`` across a step
        backend.grad_replace(parameter._prim, grads, grad)
        for former in parameter._former_keys:
            if former.key in grads:
                grads.remove(former.key)
        return True

    def _empty(self, inner: Any, value: Any, parameter: Tensor) -> Any:
        """The kernels' "no buffer" for a value of ``value``'s dtype and device."""
        key = (inner.dtype(value), parameter._device)
        empty = self.empties.get(key)
        if empty is None:
            stand_in = Tensor(value, inner, parameter._device)
            empty = self.empties[key] = empty_buffer(stand_in)._prim
        return empty


#: the dtypes the fused kernels step in place (a complex parameter is stepped as its real
#: pairs, the eager way)
_REAL_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})
