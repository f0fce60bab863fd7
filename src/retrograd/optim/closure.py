"""The closures optimizers step with: ``optimizer.step(closure)``, as in torch.

torch's closure zeroes the gradients, runs the model, calls ``loss.backward()`` and returns the
loss; the optimizer calls it as often as it needs (LBFGS several times a step, every other
optimizer once). Gradients are a value here, so a ported closure hands them back: it returns
``(loss, grads)`` with ``grads = loss.backward()`` -- only its gradient lines change::

    def closure():
        optimizer.zero_grad()
        loss = criterion(model(input), target)
        grads = loss.backward()        # torch: loss.backward()
        return loss, grads             # torch: return loss

A closure may also return the loss alone, its graph not yet walked: it is differentiated here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..autodiff import enable_grad
from ..errors import AutodiffError, InvalidArgumentError
from ..tensor import Tensor

__all__ = ["evaluate_closure"]


def evaluate_closure(closure: Callable[[], Any], where: str) -> tuple[Tensor, Any]:
    """Call ``closure`` with gradients recorded and return ``(loss, grads)``.

    The closure returns ``(loss, grads)`` (``grads = loss.backward()`` inside it) or the
    loss alone, which is then differentiated here.
    """
    with enable_grad():
        result = closure()
    if isinstance(result, tuple) and len(result) == 2:
        return result
    if not isinstance(result, Tensor):
        raise InvalidArgumentError(
            f"{where}: the closure must return (loss, grads) with grads = loss.backward(), "
            f"or the loss; it returned {type(result).__name__}"
        )
    try:
        return result, result.backward()
    except AutodiffError as error:
        raise AutodiffError(
            f"{where}: the closure's loss was already differentiated, and gradients are a "
            "value here, not kept on the parameters: write grads = loss.backward() and "
            f"return loss, grads from the closure ({error})"
        ) from error
