"""SGD, Adam and AdamW over a module's named parameters, stepping on a ``Gradients`` value.

Each step computes on the inner backend (no graph is recorded) and hands the module a new leaf
per parameter through :meth:`~retrograd.nn.Module.set_parameter`, which keeps distributed
marks. The update formulas are PyTorch's (``torch.optim``), operation for operation, so the two
agree on the same gradients up to float rounding; the test suite checks it.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgumentError
from ..tensor import Tensor, zeros_like
from ..tensor.internal import apply

__all__ = ["SGD", "Adam", "AdamW", "Optimizer"]


class Optimizer:
    """Base class: walks the module's parameters and replaces each one that has a gradient.

    Subclasses implement :meth:`update`, which maps a parameter's value, its gradient and its
    state (a dict kept per parameter name) to the new value, all on the inner backend.
    """

    def __init__(self, module: Any, lr: float):
        if not lr >= 0.0:
            raise InvalidArgumentError(
                f"{type(self).__name__}: lr must be non-negative, got {lr!r}"
            )
        self.module = module
        self.lr = float(lr)
        #: the learning rate given at construction (schedules scale from it)
        self.initial_lr = float(lr)
        #: per parameter name: its buffers (momentum, moments) and step count
        self.state: dict[str, dict[str, Any]] = {}

    def step(self, grads: Any) -> None:
        """Update every parameter that has a gradient in ``grads`` (what ``backward()``
        returned); parameters without one are left as they are, as in PyTorch."""
        for name, parameter in list(self.module.named_parameters()):
            grad = parameter.grad(grads)
            if grad is None:
                continue
            if grad.backend.is_autodiff:  # backward(create_graph=True): use the plain values
                grad = grad.inner()
            value = parameter.inner()
            state = self.state.setdefault(name, {"step": 0})
            state["step"] += 1
            new = self.update(value, grad, state)
            self.module.set_parameter(name, Tensor.from_inner(new, backend=parameter.backend))

    def update(self, value: Tensor, grad: Tensor, state: dict[str, Any]) -> Tensor:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(lr={self.lr})"


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, Nesterov momentum and weight decay.

    As ``torch.optim.SGD``: ``d = g + weight_decay * p``; with momentum
    ``b = momentum * b + (1 - dampening) * d`` (``b = d`` at the first step) and
    ``d = d + momentum * b`` (Nesterov) or ``d = b``; then ``p = p - lr * d``.

    >>> import retrograd as rg
    >>> from retrograd import nn, optim
    >>> model = nn.Linear(2, 1)
    >>> grads = model(rg.ones((1, 2))).sum().backward()
    >>> optim.SGD(model, lr=0.1, momentum=0.9).step(grads)
    """

    def __init__(
        self,
        module: Any,
        lr: float,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ):
        super().__init__(module, lr)
        if nesterov and (momentum <= 0.0 or dampening != 0.0):
            raise InvalidArgumentError(
                "SGD: Nesterov momentum requires a momentum and zero dampening"
            )
        self.momentum, self.dampening = float(momentum), float(dampening)
        self.weight_decay, self.nesterov = float(weight_decay), nesterov

    def update(self, value: Tensor, grad: Tensor, state: dict[str, Any]) -> Tensor:
        direction = grad
        if self.weight_decay:
            direction = direction + value * self.weight_decay
        if self.momentum:
            buffer = state.get("momentum")
            if buffer is None:
                buffer = direction
            else:
                buffer = buffer * self.momentum + direction * (1.0 - self.dampening)
            state["momentum"] = buffer
            direction = direction + buffer * self.momentum if self.nesterov else buffer
        return value - direction * self.lr


class Adam(Optimizer):
    """Adam (Kingma & Ba), with L2 weight decay added to the gradient as ``torch.optim.Adam``.

    ``m = m + (1 - beta1) (g - m)``, ``v = beta2 v + (1 - beta2) g^2``, then
    ``p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)``.
    """

    decoupled = False

    def __init__(
        self,
        module: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ):
        super().__init__(module, lr)
        beta1, beta2 = betas
        if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
            raise InvalidArgumentError(
                f"{type(self).__name__}: betas must be in [0, 1), got {betas!r}"
            )
        self.betas = (float(beta1), float(beta2))
        self.eps, self.weight_decay = float(eps), float(weight_decay)

    def update(self, value: Tensor, grad: Tensor, state: dict[str, Any]) -> Tensor:
        first = state.get("first_moment")
        second = state.get("second_moment")
        if first is None:
            first, second = zeros_like(grad), zeros_like(grad)
        # one fused backend kernel (Backend.adam_update documents the formula)
        hyper = (state["step"], self.lr, *self.betas, self.eps, self.weight_decay, self.decoupled)
        value, first, second = apply("adam_update", (value, grad, first, second), hyper)
        state["first_moment"], state["second_moment"] = first, second
        return value


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter), as ``torch.optim.AdamW``:
    the parameter is first scaled by ``1 - lr * weight_decay``, then takes the Adam step."""

    decoupled = True

    def __init__(
        self,
        module: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ):
        super().__init__(module, lr, betas, eps, weight_decay)
