"""torch's ``torch.utils.benchmark`` fuzzer: :class:`Fuzzer` draws benchmark inputs from
:class:`FuzzedParameter` specifications (log-uniform, uniform or a custom distribution,
:class:`ParameterAlias` tying one parameter to another) and builds :class:`FuzzedTensor` s of the
drawn sizes, contiguous or not, strided by ``steps``::

    fuzzer = Fuzzer(
        parameters=[FuzzedParameter("k0", minval=1, maxval=10000, distribution="loguniform")],
        tensors=[FuzzedTensor("x", size=("k0", 16), probability_contiguous=0.6)],
        seed=0,
    )
    for tensors, tensor_params, params in fuzzer.take(10): ...

The draws are torch's, step by step, from ``numpy.random.RandomState(seed)``: the same seed gives
the same parameters, orders, steps and contiguity as torch's fuzzer. The tensors' values come
from retrograd's generator (seeded from the same stream), so they differ from torch's.
"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ...errors import DTypeError, InvalidArgumentError

__all__ = ["FuzzedParameter", "FuzzedTensor", "Fuzzer", "ParameterAlias"]

_DISTRIBUTIONS = ("loguniform", "uniform")

#: torch's limit on tries for one valid set of parameters
_MAX_TRIES = 1000


def _rg() -> Any:
    """The retrograd package (read at call time: it imports this module while it loads)."""
    return sys.modules[__name__.partition(".")[0]]


class FuzzedParameter:
    """One parameter to draw: ``distribution`` is ``"loguniform"`` or ``"uniform"`` between
    ``minval`` and ``maxval`` (integers when both bounds are ints), or a dict of choices to
    probabilities (then no bounds). A ``strict`` parameter is drawn once per set, not redrawn
    while the others are resampled to meet the constraints."""

    def __init__(
        self,
        name: str,
        minval: int | float | None = None,
        maxval: int | float | None = None,
        distribution: str | dict[Any, float] | None = None,
        strict: bool = False,
    ) -> None:
        self._name = name
        self._minval = minval
        self._maxval = maxval
        self._distribution = self._check_distribution(distribution)
        self.strict = strict

    @property
    def name(self) -> str:
        return self._name

    def sample(self, state: np.random.RandomState) -> Any:
        if self._distribution == "loguniform":
            return self._loguniform(state)
        if self._distribution == "uniform":
            return self._uniform(state)
        return self._custom_distribution(state)

    def _check_distribution(self, distribution: Any) -> Any:
        where = f"FuzzedParameter {self._name!r}"
        if not isinstance(distribution, dict):
            if distribution not in _DISTRIBUTIONS:
                raise InvalidArgumentError(
                    f"{where}: distribution must be 'loguniform', 'uniform' or a dict of "
                    f"choices to probabilities, got {distribution!r}"
                )
            if self._minval is None or self._maxval is None:
                raise InvalidArgumentError(
                    f"{where}: a {distribution!r} distribution needs minval and maxval"
                )
            return distribution
        if any(p < 0 for p in distribution.values()):
            raise InvalidArgumentError(f"{where}: probabilities cannot be negative")
        if abs(sum(distribution.values()) - 1) > 1e-5:
            raise InvalidArgumentError(
                f"{where}: the probabilities must sum to one, got {sum(distribution.values())}"
            )
        if self._minval is not None or self._maxval is not None:
            raise InvalidArgumentError(
                f"{where}: with a custom distribution, minval and maxval must be None"
            )
        return distribution

    def _loguniform(self, state: np.random.RandomState) -> int:
        output = int(2 ** state.uniform(low=np.log2(self._minval), high=np.log2(self._maxval)))
        return min(max(output, self._minval), self._maxval)

    def _uniform(self, state: np.random.RandomState) -> int | float:
        if isinstance(self._minval, int) and isinstance(self._maxval, int):
            return int(state.randint(low=self._minval, high=self._maxval + 1))
        return state.uniform(low=self._minval, high=self._maxval)

    def _custom_distribution(self, state: np.random.RandomState) -> Any:
        index = state.choice(
            np.arange(len(self._distribution)), p=tuple(self._distribution.values())
        )
        return list(self._distribution.keys())[index]


class ParameterAlias:
    """A choice that takes the value of the parameter named ``alias_to`` (chains allowed,
    cycles refused)."""

    def __init__(self, alias_to: str) -> None:
        self.alias_to = alias_to

    def __repr__(self) -> str:
        return f"ParameterAlias[alias_to: {self.alias_to}]"


def _itemsize(dtype: Any) -> int:
    if dtype == _rg().bool:
        return 1
    info = _rg().finfo(dtype) if dtype.is_floating_point else _rg().iinfo(dtype)
    return info.bits // 8


def _prod(values: Any, base: int = 1) -> int:
    """In Python ints: NumPy's product can overflow into a negative size that passes."""
    return functools.reduce(lambda x, y: int(x) * int(y), values, base)


class FuzzedTensor:
    """A tensor of the drawn ``size`` (names of parameters or ints), allocated ``steps`` times
    larger and sliced back to it, laid out non-contiguously with probability
    ``1 - probability_contiguous``; a set of parameters giving fewer than ``min_elements``,
    more than ``max_elements`` or more than ``max_allocation_bytes`` is drawn again.
    ``dim_parameter`` names the parameter giving its number of dimensions."""

    def __init__(
        self,
        name: str,
        size: tuple[str | int, ...],
        steps: tuple[str | int, ...] | None = None,
        probability_contiguous: float = 0.5,
        min_elements: int | None = None,
        max_elements: int | None = None,
        max_allocation_bytes: int | None = None,
        dim_parameter: str | None = None,
        roll_parameter: str | None = None,
        dtype: Any = None,
        cuda: bool = False,
        tensor_constructor: Callable | None = None,
    ) -> None:
        if steps is not None and len(steps) != len(size):
            raise InvalidArgumentError(
                f"FuzzedTensor {name!r}: steps {steps} and size {size} differ in length"
            )
        self._name = name
        self._size = size
        self._steps = steps
        self._probability_contiguous = probability_contiguous
        self._min_elements = min_elements
        self._max_elements = max_elements
        self._max_allocation_bytes = max_allocation_bytes
        self._dim_parameter = dim_parameter
        self._dtype = _rg().float32 if dtype is None else dtype
        self._cuda = cuda
        self._tensor_constructor = tensor_constructor

    @property
    def name(self) -> str:
        return self._name

    @staticmethod
    def default_tensor_constructor(size: tuple[int, ...], dtype: Any, **kwargs: Any) -> Any:
        if dtype.is_floating_point:
            return _rg().rand(size=size, dtype=dtype, device="cpu")
        return _rg().randint(1, 127, size=size, dtype=dtype, device="cpu")

    def _make_tensor(self, params: dict, state: np.random.RandomState) -> tuple[Any, dict]:
        size, steps, allocation_size = self._get_size_and_steps(params)
        constructor = self._tensor_constructor or self.default_tensor_constructor
        raw_tensor = constructor(size=allocation_size, dtype=self._dtype, **params)
        if self._cuda:
            raw_tensor = raw_tensor.cuda()
        dim = len(size)
        order = np.arange(dim)
        if state.rand() > self._probability_contiguous:
            while dim > 1 and np.all(order == np.arange(dim)):
                order = state.permutation(raw_tensor.dim())
            raw_tensor = raw_tensor.permute(tuple(int(i) for i in order)).contiguous()
            raw_tensor = raw_tensor.permute(tuple(int(i) for i in np.argsort(order)))
        slices = [slice(0, n * step, step) for n, step in zip(size, steps, strict=True)]
        tensor = raw_tensor[tuple(slices)]
        properties = {
            "numel": int(tensor.numel()),
            "order": order,
            "steps": steps,
            "is_contiguous": tensor.is_contiguous(),
            "dtype": str(self._dtype),
        }
        return tensor, properties

    def _get_size_and_steps(self, params: dict) -> tuple[tuple, tuple, tuple]:
        dim = params[self._dim_parameter] if self._dim_parameter is not None else len(self._size)

        def resolve(values: tuple) -> tuple:
            values = tuple(params.get(i, i) for i in values)[:dim]
            return values + (1,) * (dim - len(values))

        size, steps = resolve(self._size), resolve(self._steps or ())
        for value in (*size, *steps):
            if isinstance(value, str):
                raise InvalidArgumentError(
                    f"FuzzedTensor {self._name!r}: no parameter named {value!r}"
                )
        allocation_size = tuple(n * step for n, step in zip(size, steps, strict=True))
        return size, steps, allocation_size

    def satisfies_constraints(self, params: dict) -> bool:
        size, _, allocation_size = self._get_size_and_steps(params)
        num_elements = _prod(size)
        allocation_bytes = _prod(allocation_size, base=_itemsize(self._dtype))

        def greater(left: int | None, right: int | None) -> bool:
            return left is not None and right is not None and left > right

        return not (
            greater(num_elements, self._max_elements)
            or greater(self._min_elements, num_elements)
            or greater(allocation_bytes, self._max_allocation_bytes)
        )


class Fuzzer:
    """Sets of parameters satisfying every tensor's limits and every ``constraints`` callable
    (called with the parameters as keywords), and the tensors built from them; ``take(n)``
    yields ``(tensors, tensor_properties, params)`` ``n`` times, the same for the same
    ``seed``, and seeds retrograd's generator from the same stream, as torch's does."""

    def __init__(
        self,
        parameters: list[FuzzedParameter | list[FuzzedParameter]],
        tensors: list[FuzzedTensor | list[FuzzedTensor]],
        constraints: list[Callable] | None = None,
        seed: int | None = None,
    ) -> None:
        if seed is None:
            seed = int(np.random.RandomState().randint(0, 2**32 - 1, dtype=np.int64))
        self._seed = seed
        self._parameters = Fuzzer._unpack(parameters, FuzzedParameter, "parameters")
        self._tensors = Fuzzer._unpack(tensors, FuzzedTensor, "tensors")
        self._constraints = constraints or ()
        overlap = {p.name for p in self._parameters} & {t.name for t in self._tensors}
        if overlap:
            raise InvalidArgumentError(
                f"Fuzzer: duplicate names in parameters and tensors: {sorted(overlap)}"
            )
        self._rejections = 0
        self._total_generated = 0

    @staticmethod
    def _unpack(values: list, cls: type, what: str) -> tuple:
        unpacked = tuple(
            itertools.chain.from_iterable([[v] if isinstance(v, cls) else v for v in values])
        )
        for value in unpacked:
            if not isinstance(value, cls):
                raise DTypeError(
                    f"Fuzzer: {what} must be {cls.__name__}s (or lists of them), got "
                    f"{type(value).__name__}"
                )
        return unpacked

    def take(self, n: int) -> Iterator[tuple[dict, dict, dict]]:
        state = np.random.RandomState(self._seed)
        _rg().manual_seed(int(state.randint(low=0, high=2**63, dtype=np.int64)))
        for _ in range(n):
            params = self._generate(state)
            tensors, tensor_properties = {}, {}
            for t in self._tensors:
                tensors[t.name], tensor_properties[t.name] = t._make_tensor(params, state)
            yield tensors, tensor_properties, params

    @property
    def rejection_rate(self) -> float:
        return self._rejections / self._total_generated if self._total_generated else 0.0

    def _generate(self, state: np.random.RandomState) -> dict:
        strict_params: dict[str, Any] = {}
        for _ in range(_MAX_TRIES):
            candidate: dict[str, Any] = {}
            for p in self._parameters:
                if p.strict:
                    if p.name not in strict_params:
                        strict_params[p.name] = p.sample(state)
                    candidate[p.name] = strict_params[p.name]
                else:
                    candidate[p.name] = p.sample(state)
            candidate = self._resolve_aliases(candidate)
            self._total_generated += 1
            if not all(f(candidate) for f in self._constraints) or not all(
                t.satisfies_constraints(candidate) for t in self._tensors
            ):
                self._rejections += 1
                continue
            return candidate
        raise InvalidArgumentError(
            f"Fuzzer: no set of parameters met the constraints in {_MAX_TRIES} tries"
        )

    @staticmethod
    def _resolve_aliases(params: dict) -> dict:
        params = dict(params)
        aliases = sum(isinstance(v, ParameterAlias) for v in params.values())
        while aliases:
            for k in list(params):
                if isinstance(params[k], ParameterAlias):
                    alias_to = params[k].alias_to
                    if alias_to not in params:
                        raise InvalidArgumentError(
                            f"Fuzzer: ParameterAlias of {k!r} names no parameter ({alias_to!r})"
                        )
                    params[k] = params[alias_to]
            remaining = sum(isinstance(v, ParameterAlias) for v in params.values())
            if remaining == aliases:
                raise InvalidArgumentError(f"Fuzzer: ParameterAlias cycle in {params}")
            aliases = remaining
        return params
