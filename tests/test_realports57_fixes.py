"""What the ports of round 57 (``tests/test_real_ports_430.py`` .. ``_434.py``) found wrong
in retrograd, each checked against torch."""

from __future__ import annotations

import warnings

import pytest
import torch

import retrograd as rg


def _plateaus(lib):
    model = lib.nn.Linear(2, 2)
    optimizer = lib.optim.SGD(model.parameters(), lr=1.0)
    return optimizer, lib.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0, factor=0.5)


def test_reduce_lr_on_plateau_takes_torchs_deprecated_epoch_argument():
    """``step(metrics, epoch)`` (warmup wrappers pass the epoch on) sets ``last_epoch`` to the
    epoch, warns as torch does, and reduces as without it; it raised a TypeError."""
    runs = []
    for lib in (torch, rg):
        optimizer, scheduler = _plateaus(lib)
        seen = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for epoch, metric in [(5, 1.0), (6, 2.0), (9, 3.0), (None, 0.5), (2, 0.7)]:
                scheduler.step(metric, epoch)
                seen.append((scheduler.last_epoch, optimizer.param_groups[0]["lr"]))
        runs.append((seen, sum("epoch parameter" in str(w.message) for w in caught)))
    assert runs[1] == runs[0]
    assert runs[0][0] == [(5, 1.0), (6, 0.5), (9, 0.25), (10, 0.25), (2, 0.125)]


def test_reduce_lr_on_plateau_refuses_an_epoch_that_is_not_a_number():
    _, scheduler = _plateaus(rg)
    with pytest.raises(rg.DTypeError, match=r"ReduceLROnPlateau\.step: epoch must be a number"):
        scheduler.step(1.0, "3")
    assert scheduler.last_epoch == 0 and scheduler.num_bad_epochs == 0  # nothing was counted
    scheduler.step(1.0)
    assert scheduler.last_epoch == 1


@pytest.mark.parametrize(
    ("keywords", "named"),
    [({"mode": "up"}, "mode 'up'"), ({"threshold_mode": "pct"}, "threshold_mode 'pct'")],
)
def test_reduce_lr_on_plateau_names_only_the_unknown_mode(keywords, named):
    """torch raises ValueError naming the one unknown mode; ours named both, the valid one as
    well ("mode 'min' / threshold_mode 'pct' unknown")."""
    optimizer = rg.optim.SGD(rg.nn.Linear(2, 2).parameters(), lr=1.0)
    with pytest.raises(rg.InvalidArgumentError) as raised:
        rg.optim.lr_scheduler.ReduceLROnPlateau(optimizer, **keywords)
    assert isinstance(raised.value, ValueError)  # (torch's type, for code catching it)
    assert named in str(raised.value) and "/" not in str(raised.value)
    with pytest.raises(ValueError, match="unknown"):
        torch.optim.lr_scheduler.ReduceLROnPlateau(
            torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=1.0), **keywords
        )


@pytest.mark.parametrize("dtype", ["int64", "bool"])
def test_lerp_of_a_non_floating_tensor_says_so(dtype):
    """An EMA's ``lerp_`` over a state dict meets integer buffers (``num_batches_tracked``):
    torch refuses them as not implemented for the dtype; ours said it expected ``end`` of the
    input's floating dtype, naming two equal dtypes."""
    with pytest.raises(NotImplementedError):
        torch.zeros(2, dtype=getattr(torch, dtype)).lerp_(
            torch.ones(2, dtype=getattr(torch, dtype)), 0.5
        )
    start = rg.zeros(2, dtype=getattr(rg, dtype))
    with pytest.raises(rg.DTypeError, match=f"lerp: not implemented for {dtype} input"):
        start.lerp_(rg.ones(2, dtype=getattr(rg, dtype)), 0.5)
    assert start.tolist() == [0, 0]  # left as it was
    with pytest.raises(rg.DTypeError, match="expected end of the input's floating dtype"):
        rg.zeros(2, dtype=rg.float64).lerp_(rg.ones(2), 0.5)
