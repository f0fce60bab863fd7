"""torch's ``BinaryOpFuzzer``: pairs of tensors ``x`` and ``y`` of one to three dimensions, of
log-uniform or power-of-two sizes, ``y`` sometimes broadcasting (a size of 1), strided and
non-contiguous at times, as torch draws them for the same seed."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..fuzzer import FuzzedParameter, FuzzedTensor, Fuzzer, ParameterAlias

__all__ = ["BinaryOpFuzzer"]

_MIN_DIM_SIZE = 16
_MAX_DIM_SIZE = 16 * 1024**2
_POW_TWO_SIZES = tuple(
    2**i for i in range(int(np.log2(_MIN_DIM_SIZE)), int(np.log2(_MAX_DIM_SIZE)) + 1)
)


class BinaryOpFuzzer(Fuzzer):
    def __init__(self, seed: int | None, dtype: Any = None, cuda: bool = False) -> None:
        super().__init__(
            parameters=[
                # dimensionality of x and y (e.g. 1D, 2D or 3D)
                FuzzedParameter("dim", distribution={1: 0.3, 2: 0.4, 3: 0.3}, strict=True),
                # shapes: arbitrary sizes and powers of two, then which one each dim uses
                [
                    FuzzedParameter(
                        name=f"k_any_{i}",
                        minval=_MIN_DIM_SIZE,
                        maxval=_MAX_DIM_SIZE,
                        distribution="loguniform",
                    )
                    for i in range(3)
                ],
                [
                    FuzzedParameter(
                        name=f"k_pow2_{i}",
                        distribution={size: 1.0 / len(_POW_TWO_SIZES) for size in _POW_TWO_SIZES},
                    )
                    for i in range(3)
                ],
                [
                    FuzzedParameter(
                        name=f"k{i}",
                        distribution={
                            ParameterAlias(f"k_any_{i}"): 0.8,
                            ParameterAlias(f"k_pow2_{i}"): 0.2,
                        },
                        strict=True,
                    )
                    for i in range(3)
                ],
                # y's dims are x's, or 1 (broadcasting)
                [
                    FuzzedParameter(
                        name=f"y_k{i}",
                        distribution={ParameterAlias(f"k{i}"): 0.8, 1: 0.2},
                        strict=True,
                    )
                    for i in range(3)
                ],
                # steps: slicing a larger tensor makes strided inputs
                [
                    FuzzedParameter(
                        name=f"{name}_step_{i}",
                        distribution={1: 0.8, 2: 0.06, 4: 0.06, 8: 0.04, 16: 0.04},
                    )
                    for i in range(3)
                    for name in ("x", "y")
                ],
                # a value for tensor constructors that want one
                FuzzedParameter(
                    name="random_value", minval=0, maxval=2**32 - 1, distribution="uniform"
                ),
            ],
            tensors=[
                FuzzedTensor(
                    name="x",
                    size=("k0", "k1", "k2"),
                    steps=("x_step_0", "x_step_1", "x_step_2"),
                    probability_contiguous=0.75,
                    min_elements=4 * 1024,
                    max_elements=32 * 1024**2,
                    max_allocation_bytes=2 * 1024**3,  # 2 GB
                    dim_parameter="dim",
                    dtype=dtype,
                    cuda=cuda,
                ),
                FuzzedTensor(
                    name="y",
                    size=("y_k0", "y_k1", "y_k2"),
                    steps=("x_step_0", "x_step_1", "x_step_2"),
                    probability_contiguous=0.75,
                    max_allocation_bytes=2 * 1024**3,  # 2 GB
                    dim_parameter="dim",
                    dtype=dtype,
                    cuda=cuda,
                ),
            ],
            seed=seed,
        )
