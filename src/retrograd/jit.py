"""torch's ``torch.jit`` names that model code carries, with eager meaning.

Model code written for TorchScript marks methods (``@torch.jit.ignore``, ``@torch.jit.unused``,
``@torch.jit.export``), branches on ``torch.jit.is_scripting()`` and annotates attributes
``torch.jit.Final``; timm, torchvision and many research models do. retrograd runs that code
as Python, as torch itself does outside a scripted call: the decorators return what they are
given, ``is_scripting()`` and ``is_tracing()`` are ``False``, ``script(m)`` and ``trace(f, x)``
return ``m`` and ``f`` unchanged (a step is made fast by :func:`retrograd.capture` instead),
``isinstance(obj, List[int])`` checks containers element by element as torch's eager form does,
``annotate(type, value)`` is ``value``, and ``fork``/``wait`` run the call at once and hand
back its completed future. A model written as a ``torch.jit.ScriptModule`` subclass with
``@torch.jit.script_method`` methods (RWKV's, older torchvision's) is an ``nn.Module`` whose
methods run as written. Saving or loading a TorchScript archive is refused by name.

>>> import retrograd as rg
>>> class Net(rg.nn.Module):
...     @rg.jit.ignore
...     def debug(self):
...         return "eager"
...     def forward(self, x):
...         return x if rg.jit.is_scripting() else x * 2
>>> rg.jit.script(Net())(rg.tensor([1.0])).tolist()
[2.0]
"""

from __future__ import annotations

import builtins
import types
import typing
import warnings
from collections.abc import Callable
from typing import Any, Final

from .errors import DTypeError, InvalidArgumentError
from .futures import Future
from .nn.modules.module import Module

__all__ = [
    "Final",
    "ScriptModule",
    "annotate",
    "export",
    "fork",
    "ignore",
    "interface",
    "is_scripting",
    "is_tracing",
    "isinstance",
    "load",
    "save",
    "script",
    "script_method",
    "trace",
    "unused",
    "wait",
]


def _marker(fn: Any = None, **_: Any) -> Any:
    """A decorator used bare (``@ignore``) or called (``@ignore(drop=True)``): the function."""
    if fn is None:
        return lambda f: f
    return fn


ignore = _marker
unused = _marker
#: torch's ``@torch.jit._overload_method`` / ``@torch.jit._overload``: the typed stubs
#: TorchScript reads (torchvision's ``_DenseLayer.forward``); the ``def`` after them is the one
#: that runs, as in eager torch
_overload_method = _marker
_overload = _marker
export = _marker
interface = _marker
script_method = _marker


class ScriptModule(Module):
    """torch's ``torch.jit.ScriptModule``: here an ``nn.Module`` like any other (its
    ``@script_method`` methods and ``forward`` run as Python), so that a model subclassing it
    builds, trains and saves as it does in torch outside TorchScript."""


def is_scripting() -> bool:
    """``False``: nothing here runs as TorchScript."""
    return False


def is_tracing() -> bool:
    """``False``: nothing here is traced by ``torch.jit.trace``."""
    return False


def script(obj: Any, *_: Any, **__: Any) -> Any:
    """``obj`` itself: it runs eagerly (``rg.capture`` replays a whole step fast)."""
    return obj


def trace(func: Any, example_inputs: Any = None, *_: Any, **__: Any) -> Any:
    """``func`` itself, run eagerly on each call."""
    return func


def annotate(the_type: Any, the_value: Any) -> Any:
    """``the_value``: the annotation is for TorchScript's compiler."""
    return the_value


def fork(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
    """A completed future of ``func(*args, **kwargs)``, called now (torch runs it
    asynchronously only under TorchScript)."""
    future: Future = Future()
    try:
        future.set_result(func(*args, **kwargs))
    except Exception as error:
        future.set_exception(error)
    return future


#: the bare containers TorchScript refuses as ``isinstance`` targets: their element types are
#: what ``torch.jit.isinstance`` checks
_BARE_CONTAINERS = {
    list: "list", dict: "dict", tuple: "tuple",
    typing.List: "List", typing.Dict: "Dict", typing.Tuple: "Tuple",  # noqa: UP006
}  # fmt: skip


def isinstance(obj: Any, target_type: Any) -> bool:  # noqa: A001 (torch's name)
    """torch's ``torch.jit.isinstance``: whether ``obj`` is a ``target_type``, where the type
    may be a parametrized container checked element by element (``List[str]``, ``Dict[str,
    Tensor]``, ``Tuple[int, str]``, ``Optional[...]``, ``Union[...]``, nested) or a tuple of
    types (any one). torchaudio branches on it (``torch.jit.isinstance(normalized, str)``). An
    empty container matches any element type, with torch's warning that eager mode cannot
    tell; a bare ``list``/``dict``/``tuple`` is refused, as torch refuses it."""
    if builtins.isinstance(target_type, tuple):
        return any(isinstance(obj, one) for one in target_type)
    if builtins.isinstance(target_type, list | set | frozenset | dict):
        raise DTypeError(
            f"jit.isinstance: the second argument must be a type or a tuple of types, got a "
            f"{type(target_type).__name__}"
        )
    return _is_instance_of(obj, target_type)


def _is_instance_of(obj: Any, target_type: Any) -> bool:
    bare = _BARE_CONTAINERS.get(target_type)
    if bare is not None:
        example = f"{bare}[int, int]" if bare.endswith("ict") else f"{bare}[int]"
        raise InvalidArgumentError(
            f"jit.isinstance: {bare} without its contained type cannot be checked; name it, "
            f"e.g. {example}"
        )
    origin = typing.get_origin(target_type)
    if origin is None:
        if target_type is Any:
            return True
        try:
            return builtins.isinstance(obj, target_type)
        except TypeError as error:
            raise DTypeError(
                f"jit.isinstance: the second argument must be a type or a tuple of types, got "
                f"{target_type!r}"
            ) from error
    arguments = typing.get_args(target_type)
    if origin is typing.Union or origin is types.UnionType:  # Optional[T] too
        return obj is None or any(_is_instance_of(obj, one) for one in arguments)
    if origin not in (list, dict, tuple):
        return builtins.isinstance(obj, origin)
    if not builtins.isinstance(obj, origin):
        return False
    if len(obj) == 0:
        warnings.warn(
            "The inner type of a container is lost when calling torch.jit.isinstance in "
            "eager mode. For example, List[int] would become list and therefore falsely "
            "return True for List[float] or List[str].",
            stacklevel=3,
        )
    if origin is list:
        return all(_is_instance_of(element, arguments[0]) for element in obj)
    if origin is dict:
        key_type, value_type = arguments
        return all(
            _is_instance_of(key, key_type) and _is_instance_of(value, value_type)
            for key, value in obj.items()
        )
    if len(arguments) == 2 and arguments[1] is Ellipsis:  # Tuple[int, ...]
        return all(_is_instance_of(element, arguments[0]) for element in obj)
    return len(obj) == len(arguments) and all(
        _is_instance_of(element, one) for element, one in zip(obj, arguments)
    )


def wait(future: Future) -> Any:
    """The value of a :func:`fork`'s future."""
    if not builtins.isinstance(future, Future):
        raise DTypeError(
            f"jit.wait: expected the Future fork returned, got {type(future).__name__}"
        )
    return future.wait()


def save(*_: Any, **__: Any) -> None:
    raise InvalidArgumentError(
        "jit.save: TorchScript archives are not made here; save the state with rg.save("
        "model.state_dict(), path) (or the module with rg.save(model, path))"
    )


def load(*_: Any, **__: Any) -> None:
    raise InvalidArgumentError(
        "jit.load: TorchScript archives cannot be read here; load a state dict saved by "
        "torch.save(model.state_dict(), path) with rg.load and model.load_state_dict"
    )


Final = Final


def _assert(condition: Any, message: str) -> None:
    """torch's ``torch._assert``: an ``assert`` that TorchScript and FX can trace; here the
    statement itself (an ``AssertionError`` with ``message``)."""
    if not bool(condition):
        raise AssertionError(message)
