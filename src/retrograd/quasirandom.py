"""``torch.quasirandom``: Sobol' low-discrepancy sequences (:class:`SobolEngine`).

The points are SciPy's (:class:`scipy.stats.qmc.Sobol`): the Joe-Kuo direction numbers for
up to 21,201 dimensions and 30 bits, as torch's engine, so an unscrambled sequence is torch's
bit for bit (``tests/test_quasirandom.py`` compares them). A scrambled one is SciPy's linear
matrix scramble with a random digital shift, the same construction as torch's, drawn from
retrograd's generator: the same for the same ``seed``, not torch's numbers.

>>> import retrograd as rg
>>> engine = rg.quasirandom.SobolEngine(2)
>>> engine.draw(4).tolist()
[[0.0, 0.0], [0.5, 0.5], [0.75, 0.25], [0.25, 0.75]]
"""

from __future__ import annotations

import operator
import warnings
from typing import Any

import numpy as np

from .backend.protocol import FLOAT_DTYPES, default_float_dtype
from .errors import DTypeError, InvalidArgumentError, ShapeError, shape_text
from .tensor import Tensor, randint, tensor

__all__ = ["SobolEngine"]


class SobolEngine:
    """torch's ``SobolEngine(dimension, scramble=False, seed=None)``: draws points of the
    ``dimension``-dimensional Sobol' sequence in ``[0, 1)``, continuing where the last draw
    ended. ``seed`` fixes a scrambled sequence; without one a seed is drawn from retrograd's
    generator (``rg.manual_seed`` makes it reproducible, as torch's global generator)."""

    MAXBIT = 30
    MAXDIM = 21201

    def __init__(self, dimension: int, scramble: bool = False, seed: int | None = None):
        dimension = _count("SobolEngine", "dimension", dimension)
        if not 1 <= dimension <= self.MAXDIM:
            raise InvalidArgumentError(
                f"SobolEngine: supported range of dimensionality is [1, {self.MAXDIM}], got "
                f"{dimension}"
            )
        self.dimension, self.scramble, self.seed = dimension, bool(scramble), seed
        if self.scramble and seed is None:
            seed = int(randint(0, 2**62, ()).item())
        from scipy.stats import qmc  # SciPy loads at the first engine

        rng = np.random.default_rng(seed) if self.scramble else None
        self._engine = qmc.Sobol(dimension, scramble=self.scramble, bits=self.MAXBIT, rng=rng)
        self.num_generated = 0

    def draw(self, n: int = 1, out: Tensor | None = None, dtype: Any = None) -> Tensor:
        """The next ``n`` points, ``[n, dimension]``, in ``dtype`` (default: the default float
        dtype); written into ``out`` too when given (of that shape)."""
        n = _count("SobolEngine.draw", "n", n)
        with warnings.catch_warnings():  # SciPy's "balance properties" note: torch has none
            warnings.simplefilter("ignore", UserWarning)
            points = self._engine.random(n)
        self.num_generated += n
        return _result("SobolEngine.draw", points, out, dtype)

    def draw_base2(self, m: int, out: Tensor | None = None, dtype: Any = None) -> Tensor:
        """The next ``2 ** m`` points, when the count drawn so far plus them is a power of 2
        (the sequence's balance properties hold only for such prefixes); else an error."""
        m = _count("SobolEngine.draw_base2", "m", m)
        total = self.num_generated + 2**m
        if total & (total - 1):
            raise InvalidArgumentError(
                "SobolEngine.draw_base2: the balance properties of Sobol' points require n to "
                f"be a power of 2; {self.num_generated} points have been drawn, then "
                f"{self.num_generated} + 2**{m} = {total} — use SobolEngine.draw() to draw "
                "them anyway"
            )
        return self.draw(2**m, out, dtype)

    def reset(self) -> SobolEngine:
        """Back to the first point (a scrambled sequence keeps its scramble)."""
        self._engine.reset()
        self.num_generated = 0
        return self

    def fast_forward(self, n: int) -> SobolEngine:
        """Skip the next ``n`` points."""
        n = _count("SobolEngine.fast_forward", "n", n)
        self._engine.fast_forward(n)
        self.num_generated += n
        return self

    def __repr__(self) -> str:
        fields = [f"dimension={self.dimension}"]
        if self.scramble:
            fields.append("scramble=True")
        if self.seed is not None:
            fields.append(f"seed={self.seed}")
        return f"SobolEngine({', '.join(fields)})"


def _count(op: str, name: str, value: Any) -> int:
    """``value`` as a count (an int, not a bool, at least 0), else an error naming ``op``."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise InvalidArgumentError(f"{op}: {name} must be an int, got {value!r}")
    value = operator.index(value)
    if value < 0:
        raise InvalidArgumentError(f"{op}: {name} must be at least 0, got {value}")
    return value


def _result(op: str, points: np.ndarray, out: Tensor | None, dtype: Any) -> Tensor:
    name = default_float_dtype() if dtype is None else str(dtype).rpartition(".")[2]
    if name not in FLOAT_DTYPES:
        raise DTypeError(f"{op}: points are floating-point; dtype {dtype} is not")
    result = tensor(points, dtype=name)
    if out is None:
        return result
    if tuple(out.shape) != tuple(result.shape):
        raise ShapeError(
            f"{op}: out has shape {shape_text(out.shape)}, the points {shape_text(result.shape)}"
        )
    out.copy_(result)
    return out
