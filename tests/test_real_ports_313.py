"""Real ports, continued (the harness: ``tests/real_ports.py``): tabular preprocessing
written here in the style of yandex-research/rtdl-num-embeddings (quantile bins and a
piecewise-linear encoding of numeric features), torch used as an array library.

Surface: the input checks (``features.isfinite().all()``,
``(features == features[0]).all(dim=0).any()``), ``torch.quantile(features,
levels.to(features), dim=0).T`` of ``torch.linspace`` levels and ``.unique()`` of each
column (an integer column loses repeated quantiles, so features get different bin counts), the
sortedness check ``(e[:-1] >= e[1:]).any()`` and a ``warnings.warn`` for a one-bin feature;
an ``nn.Module`` holding ``torch.full((n,), math.inf)``-padded edges and widths stacked by
``torch.row_stack``, ``edges.diff()``, a bool ``mask`` buffer, ``clamp_max``/``clamp``/
``clamp_min`` of the first, middle and last bins (an empty middle slice among them, NaN from
``inf / inf`` in the padding), a ``torch.stack`` of per-feature ``torch.cat`` when counts
differ, ``y.flatten(-2)`` or ``y[:, mask]``, ``torch.where(mask, y, torch.tensor(0.0, ...))``
and the buffers' ``state_dict`` keys, in float32 and float64.

Regressions guarded: each of those forms once failed or disagreed with torch (``quantile``
with a tensor of levels and ``dim``, ``unique`` of a column view, ``row_stack``, ``diff``,
a 2-d bool mask indexing a 3-d tensor, bool buffers in ``state_dict``, NaN through the clamps,
a 0-d ``torch.tensor`` as ``where``'s other); ``ValueError``s raised by the program pass
through a port unchanged.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import port, run_source

BINS_SOURCE = """
import math
import warnings

import torch
import torch.nn as nn


def quantile_edges(features, n_bins=8):
    if not features.isfinite().all():
        raise ValueError("the features contain nan/inf")
    if (features == features[0]).all(dim=0).any():
        raise ValueError("every feature needs at least two distinct values")
    levels = torch.linspace(0.0, 1.0, n_bins + 1).to(features)
    per_feature = torch.quantile(features, levels, dim=0).T
    edges = [column.unique() for column in per_feature]  # repeated quantiles merge
    for i, e in enumerate(edges):
        if (e[:-1] >= e[1:]).any():
            raise ValueError(f"the edges of feature {i} are not increasing")
        if len(e) == 2:
            warnings.warn(f"feature {i} has one bin only")
    return edges


def clamp_bins(t, count):
    # left of the first edge and right of the last one the encoding keeps growing
    if count == 1:
        return t
    first = t[..., :1].clamp_max(1.0)
    middle = t[..., 1 : count - 1].clamp(0.0, 1.0)
    last = t[..., count - 1 :].clamp_min(0.0)
    return torch.cat([first, middle, last], dim=-1)


class PiecewiseLinear(nn.Module):
    def __init__(self, edges):
        super().__init__()
        self.counts = [len(e) - 1 for e in edges]
        self.ragged = len(set(self.counts)) > 1
        widest = max(self.counts)

        def padded(values, count):
            return torch.cat([values, torch.full((widest - count,), math.inf, dtype=values.dtype)])

        pairs = list(zip(edges, self.counts))
        self.register_buffer("edges", torch.row_stack([padded(e[:-1], c) for e, c in pairs]))
        self.register_buffer("width", torch.row_stack([padded(e.diff(), c) for e, c in pairs]))
        used = [torch.arange(widest) < c for c in self.counts]
        self.register_buffer("mask", torch.row_stack(used))

    def forward(self, x):
        t = (x[..., None] - self.edges) / self.width
        if not self.ragged:
            return clamp_bins(t, self.counts[0])
        return torch.stack([clamp_bins(t[..., i, :], c) for i, c in enumerate(self.counts)], dim=-2)


class Encoder(nn.Module):
    def __init__(self, edges):
        super().__init__()
        self.impl = PiecewiseLinear(edges)

    def forward(self, x):
        y = self.impl(x)
        return y[:, self.impl.mask] if self.impl.ragged else y.flatten(-2)


def zero_padding(impl, x):
    y = impl(x)
    if impl.ragged:
        y = torch.where(impl.mask, y, torch.tensor(0.0, dtype=y.dtype))
    return y
"""

BINS_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
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
        bins = ns["quantile_edges"](features, n_bins=n_bins)
    encoding = ns["Encoder"](bins)
    encoded = encoding(lib.tensor(test))
    padded = ns["zero_padding"](encoding.impl, lib.tensor(test))
    state = {k: v.numpy() for k, v in encoding.state_dict().items()}
    return {
        "bins": [b.numpy() for b in bins],
        "warnings": [str(w.message) for w in caught],
        "encoded": encoded.numpy(),
        "padded": padded.numpy(),
        "state": state,
        "counts": encoding.impl.counts,
    }


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n_bins", [8, 3])
def test_rtdl_quantile_bins_and_piecewise_linear_encoding_as_torch(dtype, n_bins):
    train, test = _table(np.random.default_rng(3130), dtype)
    theirs = _run(run_source(BINS_SOURCE, torch), torch, train, test, n_bins)
    ours = _run(run_source(port(BINS_SOURCE, BINS_STEPS), rg), rg, train, test, n_bins)
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
    ns = run_source(port(BINS_SOURCE, BINS_STEPS), rg)
    constant = rg.ones(10, 2)
    with pytest.raises(ValueError, match="at least two distinct values"):
        ns["quantile_edges"](constant, n_bins=3)
    with pytest.raises(ValueError, match="nan/inf"):
        ns["quantile_edges"](rg.tensor([[0.0, 1.0], [float("nan"), 2.0], [1.0, 3.0]]), n_bins=2)
