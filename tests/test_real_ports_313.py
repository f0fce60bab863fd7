"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
tabular preprocessing, torch used as an array library.

- the quantile bins and piecewise-linear encoding of yandex-research/rtdl-num-embeddings as
  ``package/rtdl_num_embeddings.py`` writes them (the docstrings and the tree-based branch,
  which needs scikit-learn, left out): ``compute_bins``'s checks (``X.isfinite().all()``,
  ``(X == X[0]).all(dim=0).any()``), ``torch.quantile(X, torch.linspace(0.0, 1.0, n_bins +
  1).to(X), dim=0).T`` and ``q.unique()`` of each column (integer-valued columns lose
  repeated quantiles, so the features get different bin counts); ``_check_bins`` (sortedness
  by ``(feature_bins[:-1] >= feature_bins[1:]).any()``, the ``warnings.warn`` of a
  two-edge feature); ``_PiecewiseLinearEncodingImpl`` (``torch.full((n,), math.inf)``
  padding, ``torch.row_stack``, ``edges.diff()``, the bool ``mask`` buffer,
  ``clamp_max``/``clamp``/``clamp_min`` of the first, middle and last bins, the ``torch.stack``
  of per-feature ``torch.cat`` when the counts differ); ``PiecewiseLinearEncoding``
  (``x.flatten(-2)`` or ``x[:, self.impl.mask]``) and ``PiecewiseLinearEmbeddings``'s
  ``torch.where(self.impl.mask, x, torch.tensor(0.0, ...))`` in float32 and float64.

The lines changed: the ``import`` lines.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import port, run_source

RTDL_SOURCE = """
import math
import warnings
from typing import Any, Dict, List, Optional, Union

import torch
import torch.nn as nn
from torch import Tensor


def _check_input_shape(x: Tensor, expected_n_features: int) -> None:
    if x.ndim < 1:
        raise ValueError(
            f'The input must have at least one dimension, however: {x.ndim=}'
        )
    if x.shape[-1] != expected_n_features:
        raise ValueError(
            'The last dimension of the input was expected to be'
            f' {expected_n_features}, however, {x.shape[-1]=}'
        )


def _check_bins(bins: List[Tensor]) -> None:
    if not bins:
        raise ValueError('The list of bins must not be empty')
    for i, feature_bins in enumerate(bins):
        if not isinstance(feature_bins, Tensor):
            raise ValueError(
                'bins must be a list of PyTorch tensors. '
                f'However, for {i=}: {type(bins[i])=}'
            )
        if feature_bins.ndim != 1:
            raise ValueError(
                'Each item of the bin list must have exactly one dimension.'
                f' However, for {i=}: {bins[i].ndim=}'
            )
        if len(feature_bins) < 2:
            raise ValueError(
                'All features must have at least two bin edges.'
                f' However, for {i=}: {len(bins[i])=}'
            )
        if not feature_bins.isfinite().all():
            raise ValueError(
                'Bin edges must not contain nan/inf/-inf.'
                f' However, this is not true for the {i}-th feature'
            )
        if (feature_bins[:-1] >= feature_bins[1:]).any():
            raise ValueError(
                'Bin edges must be sorted.'
                f' However, the for the {i}-th feature, the bin edges are not sorted'
            )
        if len(feature_bins) == 2:
            warnings.warn(
                f'The {i}-th feature has just two bin edges, which means only one bin.'
                ' Strictly speaking, using a single bin for the'
                ' piecewise-linear encoding should not break anything,'
                ' but it is the same as using sklearn.preprocessing.MinMaxScaler'
            )


def compute_bins(
    X: torch.Tensor,
    n_bins: int = 48,
    *,
    tree_kwargs: Optional[Dict[str, Any]] = None,
    y: Optional[Tensor] = None,
    regression: Optional[bool] = None,
    verbose: bool = False,
) -> List[Tensor]:
    if not isinstance(X, Tensor):
        raise ValueError(f'X must be a PyTorch tensor, however: {type(X)=}')
    if X.ndim != 2:
        raise ValueError(f'X must have exactly two dimensions, however: {X.ndim=}')
    if X.shape[0] < 2:
        raise ValueError(f'X must have at least two rows, however: {X.shape[0]=}')
    if X.shape[1] < 1:
        raise ValueError(f'X must have at least one column, however: {X.shape[1]=}')
    if not X.isfinite().all():
        raise ValueError('X must not contain nan/inf/-inf.')
    if (X == X[0]).all(dim=0).any():
        raise ValueError(
            'All columns of X must have at least two distinct values.'
            ' However, X contains columns with just one distinct value.'
        )
    if n_bins <= 1 or n_bins >= len(X):
        raise ValueError(
            'n_bins must be more than 1, but less than len(X), however:'
            f' {n_bins=}, {len(X)=}'
        )

    if tree_kwargs is None:
        if y is not None or regression is not None or verbose:
            raise ValueError(
                'If tree_kwargs is None, then y must be None, regression must be None'
                ' and verbose must be False'
            )

        bins = [
            q.unique()
            for q in torch.quantile(
                X, torch.linspace(0.0, 1.0, n_bins + 1).to(X), dim=0
            ).T
        ]
        _check_bins(bins)
        return bins
    raise NotImplementedError('the tree-based bins are left out of this port')


class _PiecewiseLinearEncodingImpl(nn.Module):
    edges: Tensor
    width: Tensor
    mask: Tensor

    def __init__(self, bins: List[Tensor]) -> None:
        _check_bins(bins)

        super().__init__()
        # To stack bins to a tensor, all features must have the same number of bins.
        # To achieve that, for each feature with a less-than-max number of bins,
        # its bins are padded with additional phantom bins with infinite edges.
        max_n_edges = max(len(x) for x in bins)
        padding = torch.full(
            (max_n_edges,),
            math.inf,
            dtype=bins[0].dtype,
            device=bins[0].device,
        )
        edges = torch.row_stack([torch.cat([x, padding])[:max_n_edges] for x in bins])

        # The rightmost edge is needed only to compute the width of the rightmost bin.
        self.register_buffer('edges', edges[:, :-1])
        self.register_buffer('width', edges.diff())
        # mask is false for the padding values.
        self.register_buffer(
            'mask',
            torch.row_stack(
                [
                    torch.cat(
                        [
                            torch.ones(len(x) - 1, dtype=torch.bool, device=x.device),
                            torch.zeros(
                                max_n_edges - 1, dtype=torch.bool, device=x.device
                            ),
                        ]
                    )[: max_n_edges - 1]
                    for x in bins
                ]
            ),
        )
        self._bin_counts = tuple(len(x) - 1 for x in bins)
        self._same_bin_count = all(x == self._bin_counts[0] for x in self._bin_counts)

    def forward(self, x: Tensor) -> Tensor:
        _check_input_shape(x, self.edges.shape[0])

        # See Equation 1 in the paper.
        x = (x[..., None] - self.edges) / self.width

        # If the number of bins is greater than 1, then, the following rules must
        # be applied to a piecewise-linear encoding of a single feature:
        # - the leftmost value can be negative, but not greater than 1.0.
        # - the rightmost value can be greater than 1.0, but not negative.
        # - the intermediate values must stay within [0.0, 1.0].
        n_bins = x.shape[-1]
        if n_bins > 1:
            if self._same_bin_count:
                x = torch.cat(
                    [
                        x[..., :1].clamp_max(1.0),
                        *([] if n_bins == 2 else [x[..., 1:-1].clamp(0.0, 1.0)]),
                        x[..., -1:].clamp_min(0.0),
                    ],
                    dim=-1,
                )
            else:
                # In this case, the rightmost values for all features are located
                # in different columns.
                x = torch.stack(
                    [
                        x[..., i, :]
                        if count == 1
                        else torch.cat(
                            [
                                x[..., i, :1].clamp_max(1.0),
                                *(
                                    []
                                    if n_bins == 2
                                    else [x[..., i, 1 : count - 1].clamp(0.0, 1.0)]
                                ),
                                x[..., i, count - 1 : count].clamp_min(0.0),
                                x[..., i, count:],
                            ],
                            dim=-1,
                        )
                        for i, count in enumerate(self._bin_counts)
                    ],
                    dim=-2,
                )
        return x


class PiecewiseLinearEncoding(nn.Module):
    def __init__(self, bins: List[Tensor]) -> None:
        _check_bins(bins)

        super().__init__()
        self.impl = _PiecewiseLinearEncodingImpl(bins)

    def forward(self, x: Tensor) -> Tensor:
        x = self.impl(x)
        return x.flatten(-2) if self.impl._same_bin_count else x[:, self.impl.mask]


def zeroed_padding(impl: _PiecewiseLinearEncodingImpl, x: Tensor) -> Tensor:
    # PiecewiseLinearEmbeddings.forward up to its linear layer
    x = impl(x)
    if not impl._same_bin_count:
        # Replace infinite values with zeros.
        x = torch.where(
            impl.mask, x, torch.tensor(0.0, dtype=x.dtype, device=x.device)
        )
    return x
"""

RTDL_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch import Tensor\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd import Tensor\n",
    ),
]


def _table(rng, dtype):
    """Train and test columns: two continuous, one of small integers (repeated quantiles),
    one of two values (a single bin: ``_check_bins``'s warning)."""
    n = 300
    train = np.stack(
        [
            rng.standard_normal(n) * 3 + 1,
            rng.exponential(2.0, n),
            rng.integers(0, 6, n).astype(np.float64),
            rng.integers(0, 2, n).astype(np.float64),
        ],
        axis=1,
    ).astype(dtype)
    test = np.concatenate([train[:20], rng.standard_normal((10, 4)).astype(dtype) * 5])
    return train, test


def _run(ns, lib, train, test, n_bins):
    features = lib.tensor(train)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bins = ns["compute_bins"](features, n_bins=n_bins)
    encoding = ns["PiecewiseLinearEncoding"](bins)
    encoded = encoding(lib.tensor(test))
    padded = ns["zeroed_padding"](encoding.impl, lib.tensor(test))
    state = {k: v.numpy() for k, v in encoding.state_dict().items()}
    return {
        "bins": [b.numpy() for b in bins],
        "warnings": [str(w.message) for w in caught],
        "encoded": encoded.numpy(),
        "padded": padded.numpy(),
        "state": state,
        "counts": encoding.impl._bin_counts,
    }


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n_bins", [8, 3])
def test_rtdl_quantile_bins_and_piecewise_linear_encoding_as_torch(dtype, n_bins):
    train, test = _table(np.random.default_rng(3130), dtype)
    theirs = _run(run_source(RTDL_SOURCE, torch), torch, train, test, n_bins)
    ours = _run(run_source(port(RTDL_SOURCE, RTDL_STEPS), rg), rg, train, test, n_bins)
    tolerance = {"float32": 1e-5, "float64": 1e-12}[dtype]
    assert ours["counts"] == theirs["counts"]
    assert ours["warnings"] == theirs["warnings"] and len(theirs["warnings"]) == 1
    for mine, reference in zip(ours["bins"], theirs["bins"], strict=True):
        assert mine.dtype == reference.dtype
        np.testing.assert_allclose(mine, reference, tolerance, tolerance)
    for name in ("encoded", "padded"):
        assert ours[name].shape == theirs[name].shape, name
        np.testing.assert_allclose(ours[name], theirs[name], tolerance, tolerance, err_msg=name)
    assert list(ours["state"]) == list(theirs["state"]) == ["impl.edges", "impl.width", "impl.mask"]
    for name, value in theirs["state"].items():
        assert ours["state"][name].dtype == value.dtype, name
        np.testing.assert_allclose(ours["state"][name], value, tolerance, tolerance, err_msg=name)


def test_compute_bins_refuses_what_rtdl_refuses():
    ns = run_source(port(RTDL_SOURCE, RTDL_STEPS), rg)
    constant = rg.ones(10, 2)
    with pytest.raises(ValueError, match="at least two distinct values"):
        ns["compute_bins"](constant, n_bins=3)
    with pytest.raises(ValueError, match="nan/inf"):
        ns["compute_bins"](rg.tensor([[0.0, 1.0], [float("nan"), 2.0], [1.0, 3.0]]), n_bins=2)
