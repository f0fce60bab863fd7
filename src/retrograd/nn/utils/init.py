"""torch's ``torch.nn.utils.skip_init``."""

from __future__ import annotations

import inspect
from typing import Any

from ...errors import InvalidArgumentError, check_callable

__all__ = ["skip_init"]


def skip_init(module_cls: type, *args: Any, **kwargs: Any) -> Any:
    """``module_cls(*args, **kwargs)`` whose parameters are to be set by the caller (torch's
    ``skip_init``, which leaves them uninitialized; here they hold the constructor's values,
    one valid choice of "uninitialized"). As torch's, the class must take a ``device``
    argument.

    >>> from retrograd import nn
    >>> skip_init(nn.Linear, 3, 2).weight.shape
    retrograd.Size([2, 3])
    """
    check_callable("skip_init", module_cls, "module_cls")
    parameters = inspect.signature(module_cls).parameters
    if "device" not in parameters and not any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    ):
        raise InvalidArgumentError(
            f"skip_init: Module must support a 'device' arg to skip initialization "
            f"({module_cls.__name__} has none)"
        )
    return module_cls(*args, **kwargs)
