"""torch.jit's names in model code, with eager meaning (``retrograd/jit.py``): code written
for TorchScript (timm's, torchvision's) runs as torch runs it outside a scripted call."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


def _model(lib):
    class Block(lib.nn.Module):
        scale: lib.jit.Final[float]

        def __init__(self):
            super().__init__()
            self.scale = 2.0
            self.linear = lib.nn.Linear(3, 2)

        @lib.jit.ignore
        def no_weight_decay(self):
            return {"linear.bias"}

        @lib.jit.unused
        def debug(self, x):
            return x

        @lib.jit.export
        def features(self, x):
            return self.linear(x)

        @lib.jit.ignore(drop=True)
        def dropped(self):
            return "kept eagerly"

        def forward(self, x):
            lib._assert(x.shape[-1] == 3, "expected 3 features")
            if lib.jit.is_scripting() or lib.jit.is_tracing():
                return x
            y = lib.jit.annotate(lib.Tensor, self.features(x)) * self.scale
            future = lib.jit.fork(lambda t: t + 1, y)
            return lib.jit.wait(future)

    return Block()


def test_model_code_written_for_torchscript_runs_as_torch_runs_it():
    torch.manual_seed(0)
    theirs, ours = _model(torch), _model(rg)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    scripted = rg.jit.script(ours)
    assert scripted is ours and rg.jit.trace(ours, rg.tensor(x)) is ours
    np.testing.assert_allclose(
        scripted(rg.tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), rtol=1e-6
    )
    assert ours.no_weight_decay() == theirs.no_weight_decay() == {"linear.bias"}
    assert ours.dropped() == "kept eagerly"
    with pytest.raises(AssertionError, match="expected 3 features"):
        ours(rg.ones(2, 4))


def test_fork_hands_back_a_failure_and_archives_are_refused_by_name():
    future = rg.jit.fork(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        rg.jit.wait(future)
    with pytest.raises(rg.InvalidArgumentError, match=r"jit.save: .*rg.save\(model.state_dict"):
        rg.jit.save(rg.nn.Linear(2, 2), "model.pt")
    with pytest.raises(rg.InvalidArgumentError, match=r"jit\.load: TorchScript archives"):
        rg.jit.load("model.pt")
