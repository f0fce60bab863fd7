"""torch's ``torch.distributed.checkpoint.state_dict``: a model's and its optimizers' state
dicts in the form DCP saves, parameters named by their fully qualified names::

    model_sd, optim_sd = get_state_dict(model, optimizer)
    # optim_sd == {"state": {"fc.weight": {...}},
    #              "param_groups": [{..., "params": ["fc.weight", ...]}]}
    set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd)

A wrapper's prefix is not part of the names (``DistributedDataParallel``'s ``module.``,
``compile``'s ``_orig_mod.``), as in torch. An optimizer without state yet gets it first (one
step with zero gradients at learning rate 0, torch's ``_init_optim_state``), so that a fresh
optimizer's state dict has the buffers :func:`~retrograd.distributed.checkpoint.load` fills.
Several optimizers of one model share one state dict (their groups in order).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ...errors import DTypeError, InvalidArgumentError, KeyMismatchError

__all__ = [
    "StateDictOptions",
    "get_model_state_dict",
    "get_optimizer_state_dict",
    "get_state_dict",
    "set_model_state_dict",
    "set_optimizer_state_dict",
    "set_state_dict",
]


@dataclass
class StateDictOptions:
    """torch's options. ``ignore_frozen_params`` drops parameters that do not require grad;
    ``strict`` is ``load_state_dict``'s; ``flatten_optimizer_state_dict`` gives flat keys
    (``state.fc.weight.exp_avg``, ``param_groups.fc.weight.lr``). With one process holding
    everything, ``full_state_dict``, ``cpu_offload`` and ``broadcast_from_rank0`` change
    nothing."""

    full_state_dict: bool = False
    cpu_offload: bool = False
    ignore_frozen_params: bool = False
    keep_submodule_prefixes: bool = True
    strict: bool = True
    broadcast_from_rank0: bool = False
    flatten_optimizer_state_dict: bool = False
    dsd_fqn_modifiers: str = "_fqn_modifiers"


_WRAPPERS = ("DistributedDataParallel", "DataParallel")


def _unwrapped(model: Any) -> Any:
    if not callable(getattr(model, "named_parameters", None)):  # (a bare AttributeError)
        raise DTypeError(
            f"distributed.checkpoint.state_dict: model must be a Module, got {type(model).__name__}"
        )
    while True:
        if type(model).__name__ in _WRAPPERS and hasattr(model, "module"):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


def _optimizers(optimizers: Any) -> list[Any]:
    optimizers = list(optimizers) if isinstance(optimizers, Iterable) else [optimizers]
    for optimizer in optimizers:  # (a bare AttributeError of 'state' from inside)
        if not hasattr(optimizer, "param_groups") or not callable(
            getattr(optimizer, "load_state_dict", None)
        ):
            raise DTypeError(
                "distributed.checkpoint.state_dict: optimizers must be optimizers, got "
                f"{type(optimizer).__name__}"
            )
    return optimizers


def _names(model: Any) -> dict[int, str]:
    return {id(p): name for name, p in _unwrapped(model).named_parameters(remove_duplicate=False)}


def _fqns(optimizer: Any, names: dict[int, str], op: str) -> list[str]:
    """The model's names of ``optimizer``'s parameters, in its numbering."""
    found = []
    for number, param in enumerate(_numbering(optimizer)):
        name = names.get(id(param))
        if name is None:
            raise KeyMismatchError(
                f"{op}: optimizer parameter {number} (shape {list(param.shape)}) is not a "
                "parameter of the model"
            )
        found.append(name)
    return found


def get_model_state_dict(
    model: Any, *, submodules: Any = None, options: StateDictOptions | None = None
) -> dict[str, Any]:
    """``model.state_dict()`` without wrappers' prefixes (frozen parameters dropped with
    ``ignore_frozen_params``)."""
    if submodules is not None:
        raise InvalidArgumentError(
            "get_model_state_dict: submodules is deprecated in torch and not supported"
        )
    options = options or StateDictOptions()
    inner = _unwrapped(model)
    state = inner.state_dict()
    if options.ignore_frozen_params:
        frozen = {name for name, p in inner.named_parameters() if not p.requires_grad}
        state = {k: v for k, v in state.items() if k not in frozen}
    return dict(state)


def _init_optim_state(model: Any, optimizer: Any) -> None:
    """torch's: an optimizer that has not stepped gets its state from one step with zero
    gradients at learning rate 0 (the parameters do not move)."""
    if optimizer.state:
        return
    params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
    if not params:
        return
    total = None
    for p in params:
        term = (p * 0).sum()
        total = term if total is None else total + term
    grads = total.backward()
    rates = [g.get("lr") for g in optimizer.param_groups]
    for group in optimizer.param_groups:
        if "lr" in group:
            group["lr"] = 0.0
    try:
        optimizer.step(grads)
    finally:
        for group, rate in zip(optimizer.param_groups, rates, strict=True):
            if rate is not None:
                group["lr"] = rate


def _numbering(optimizer: Any) -> list[Any]:
    """The parameters by the numbers of ``optimizer.state_dict()`` (by place across groups)."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def get_optimizer_state_dict(
    model: Any, optimizers: Any, *, submodules: Any = None, options: StateDictOptions | None = None
) -> dict[str, Any]:
    """The optimizers' state dict with parameters named by FQN instead of numbers."""
    options = options or StateDictOptions()
    names = _names(model)
    state: dict[str, Any] = {}
    groups: list[dict[str, Any]] = []
    for optimizer in _optimizers(optimizers):
        _init_optim_state(model, optimizer)
        numbered = optimizer.state_dict()
        params = _numbering(optimizer)

        def fqn(number: int, params: list = params) -> str:
            name = names.get(id(params[number]))
            if name is None:
                raise KeyMismatchError(
                    f"get_optimizer_state_dict: optimizer parameter {number} is not a "
                    "parameter of the model"
                )
            return name

        for number, entry in numbered["state"].items():
            state[fqn(int(number))] = entry
        for group in numbered["param_groups"]:
            groups.append({**group, "params": [fqn(n) for n in group["params"]]})
    result = {"state": state, "param_groups": groups}
    return _flatten_optim(result) if options.flatten_optimizer_state_dict else result


def _flatten_optim(osd: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, entry in osd["state"].items():
        for key, value in entry.items():
            flat[f"state.{name}.{key}"] = value
    for group in osd["param_groups"]:
        for name in group["params"]:
            for key, value in group.items():
                if key != "params":
                    flat[f"param_groups.{name}.{key}"] = value
    return flat


def _unflatten_optim(flat: dict[str, Any], optimizers: list, names: dict[int, str]) -> dict:
    state: dict[str, dict[str, Any]] = {}
    groups = []
    for optimizer in optimizers:
        named = iter(_fqns(optimizer, names, "set_optimizer_state_dict"))
        for group in optimizer.param_groups:
            fqns = [next(named) for _ in group["params"]]
            if not fqns:
                continue
            settings = {
                key: flat[f"param_groups.{fqns[0]}.{key}"]
                for key in group
                if key != "params" and f"param_groups.{fqns[0]}.{key}" in flat
            }
            groups.append({**settings, "params": fqns})
            for name in fqns:
                prefix = f"state.{name}."
                entry = {k[len(prefix) :]: v for k, v in flat.items() if k.startswith(prefix)}
                if entry:
                    state[name] = entry
    return {"state": state, "param_groups": groups}


def get_state_dict(
    model: Any, optimizers: Any, *, submodules: Any = None, options: StateDictOptions | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(get_model_state_dict(model), get_optimizer_state_dict(model, optimizers))``."""
    return (
        get_model_state_dict(model, submodules=submodules, options=options),
        get_optimizer_state_dict(model, optimizers, submodules=submodules, options=options),
    )


def set_model_state_dict(
    model: Any, model_state_dict: dict[str, Any], *, options: StateDictOptions | None = None
) -> Any:
    """``load_state_dict`` into the unwrapped model; returns its missing/unexpected keys."""
    options = options or StateDictOptions()
    strict = options.strict and not options.ignore_frozen_params
    return _unwrapped(model).load_state_dict(model_state_dict, strict=strict)


def set_optimizer_state_dict(
    model: Any,
    optimizers: Any,
    optim_state_dict: dict[str, Any],
    *,
    options: StateDictOptions | None = None,
) -> None:
    """Each optimizer's share of an FQN-named state dict, renumbered and loaded."""
    optimizers = _optimizers(optimizers)
    names = _names(model)
    if not isinstance(optim_state_dict, dict):
        raise DTypeError(
            "set_optimizer_state_dict: optim_state_dict must be a dict (get_optimizer_state_"
            f"dict's), got {type(optim_state_dict).__name__}"
        )
    if "state" not in optim_state_dict or "param_groups" not in optim_state_dict:
        optim_state_dict = _unflatten_optim(optim_state_dict, optimizers, names)
    groups, states = optim_state_dict["param_groups"], optim_state_dict["state"]
    if (
        not isinstance(states, dict)
        or not isinstance(groups, list | tuple)
        or not all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups)
    ):
        raise InvalidArgumentError(
            "set_optimizer_state_dict: optim_state_dict is damaged: 'state' must be a dict and "
            "'param_groups' a list of dicts with a 'params' list (get_optimizer_state_dict's "
            f"form), got {type(states).__name__} and {type(groups).__name__}"
        )
    groups = list(groups)
    for optimizer in optimizers:
        number = {
            name: k for k, name in enumerate(_fqns(optimizer, names, "set_optimizer_state_dict"))
        }
        own = [g for g in groups if g["params"] and g["params"][0] in number]
        if len(own) != len(optimizer.param_groups):
            raise KeyMismatchError(
                f"set_optimizer_state_dict: the state dict has {len(own)} groups for an "
                f"optimizer with {len(optimizer.param_groups)}"
            )
        unknown = [n for g in own for n in g["params"] if n not in number]
        if unknown:
            raise KeyMismatchError(
                f"set_optimizer_state_dict: the state dict's groups name parameters "
                f"{unknown} that are not this optimizer's (a state dict of another model?)"
            )
        state = {
            number[name]: entry
            for name, entry in optim_state_dict["state"].items()
            if name in number
        }
        renumbered = [{**g, "params": [number[n] for n in g["params"]]} for g in own]
        optimizer.load_state_dict({"state": state, "param_groups": renumbered})


def set_state_dict(
    model: Any,
    optimizers: Any,
    *,
    model_state_dict: dict[str, Any],
    optim_state_dict: dict[str, Any],
    options: StateDictOptions | None = None,
) -> Any:
    """:func:`set_model_state_dict` and :func:`set_optimizer_state_dict` together."""
    result = set_model_state_dict(model, model_state_dict, options=options)
    set_optimizer_state_dict(model, optimizers, optim_state_dict, options=options)
    return result
