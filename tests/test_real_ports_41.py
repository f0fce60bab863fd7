"""Real ports, continued (the harness: ``tests/real_ports.py``): BYOL, a program written here
in the style of lucidrains/byol-pytorch and its README's training loop, over a small conv net
standing in for a ResNet, with the hidden layer chosen by name (``"avgpool"``) and by child
index (``-2``).

What it exercises: a caching decorator keeping the lazily built projector and target network
on the instance (``getattr``/``setattr`` around ``@wraps``); the hidden layer read by
``layer.register_forward_hook(self._keep)`` (a bound method) into a dict keyed by
``inputs[0].device``, the layer found through ``dict(named_modules())`` or
``list(children())``; ``head(...).to(hidden)`` (``Module.to`` of a tensor); a dry forward of
``torch.randn(2, 3, size, size, device=device)`` in ``__init__`` that builds them; the target
made by ``copy.deepcopy`` of the online encoder (its forward hook, a bound method of the
wrapper, bound to the copy) and frozen by ``p.requires_grad = False``; a batch-norm class
chosen by ``dist.is_initialized()``; the loss ``2 - 2 * (p * z).sum(dim=-1)`` of
``F.normalize(x, dim=-1, p=2)``; ``chunk(2, dim=0)``; the moving average written through
``target_p.data = ...``; Adam over ``learner.parameters()`` (the frozen target's among them),
the target updated after each step and ``torch.save(backbone.state_dict(), ...)``.

``torch.randn`` draws from one seeded stream in both runs, in float64. The lines changed: the
gradient lines; the two views are a flip and a scaled copy (no torchvision here).

Regression guarded: ``torch.load`` of a file written by ``torch.save(backbone.state_dict(),
path)`` gave NumPy arrays here (a state dict's values were saved as plain arrays); torch gives
tensors. ``rg.save`` stores a state value as the tensor it stands for, so it loads back as one
(``tests/test_realports6_fixes.py``).
"""

from __future__ import annotations

import copy
from functools import wraps

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, port, run_source

BYOL_SOURCE = """
def first_not_none(value, fallback):
    return fallback if value is None else value


def flatten(t):
    return t.reshape(len(t), -1)


def cached(attribute):
    # build the value on the first call and keep it on the instance
    def decorate(build):
        @wraps(build)
        def get(self, *args, **kwargs):
            value = getattr(self, attribute)
            if value is None:
                value = build(self, *args, **kwargs)
                setattr(self, attribute, value)
            return value

        return get

    return decorate


def device_of(module):
    first = next(module.parameters())
    return first.device


def freeze(module):
    for p in module.parameters():
        p.requires_grad = False


def batch_norm_class(sync=None):
    if sync is None:
        sync = dist.is_initialized() and dist.get_world_size() > 1
    return nn.SyncBatchNorm if sync else nn.BatchNorm1d


def head(dim_in, dim_out, hidden, sync=None):
    norm = batch_norm_class(sync)
    return nn.Sequential(
        nn.Linear(dim_in, hidden, bias=False),  # (no bias: the batch norm would cancel it)
        norm(hidden),
        nn.ReLU(inplace=True),
        nn.Linear(hidden, dim_out),
    )


def cosine_regression(p, z):
    p, z = F.normalize(p, dim=-1, p=2), F.normalize(z, dim=-1, p=2)
    return 2 - 2 * (p * z).sum(dim=-1)


class MovingAverage:
    def __init__(self, decay):
        self.decay = decay

    def __call__(self, old, new):
        return new if old is None else self.decay * old + (1 - self.decay) * new


def ema_update(average, target, online):
    for online_p, target_p in zip(online.parameters(), target.parameters()):
        target_p.data = average(target_p.data, online_p.data)


class HiddenLayerEncoder(nn.Module):
    # runs the backbone and reads one inner layer's output through a forward hook
    def __init__(self, backbone, layer, proj_dim, proj_hidden, sync=None):
        super().__init__()
        self.backbone = backbone
        self.layer = layer
        self.proj_dim, self.proj_hidden, self.sync = proj_dim, proj_hidden, sync
        self.projector = None
        self.captured = {}
        self.hooked = False

    def _find_layer(self):
        if isinstance(self.layer, str):
            return dict(self.backbone.named_modules()).get(self.layer)
        if isinstance(self.layer, int):
            return list(self.backbone.children())[self.layer]
        return None

    def _keep(self, module, inputs, output):
        self.captured[inputs[0].device] = flatten(output)

    def embed(self, x):
        if self.layer == -1:
            return self.backbone(x)
        if not self.hooked:
            layer = self._find_layer()
            assert layer is not None, f"no layer {self.layer!r} in the backbone"
            layer.register_forward_hook(self._keep)
            self.hooked = True
        self.captured.clear()
        self.backbone(x)
        return self.captured.pop(x.device)

    @cached("projector")
    def _projector(self, hidden):
        return head(hidden.shape[1], self.proj_dim, self.proj_hidden, self.sync).to(hidden)

    def forward(self, x, project=True):
        hidden = self.embed(x)
        if not project:
            return hidden
        return self._projector(hidden)(hidden), hidden


class BYOL(nn.Module):
    def __init__(self, backbone, image_size, layer=-2, proj_dim=4, proj_hidden=16,
                 view_one=None, view_two=None, decay=0.99, sync=None):
        super().__init__()
        self.backbone = backbone
        self.view_one = view_one
        self.view_two = first_not_none(view_two, view_one)
        self.online = HiddenLayerEncoder(backbone, layer, proj_dim, proj_hidden, sync)
        self.predictor = head(proj_dim, proj_dim, proj_hidden)
        self.target = None
        self.average = MovingAverage(decay)
        device = device_of(backbone)
        self.to(device)
        # a dry run on noise builds the projector and the target before training
        noise = torch.randn(2, 3, image_size, image_size, device=device)
        self.forward(noise)

    @cached("target")
    def _target(self):
        target = copy.deepcopy(self.online)
        freeze(target)
        return target

    def update_target(self):
        assert self.target is not None, "no target network yet"
        ema_update(self.average, self.target, self.online)

    def forward(self, x, embed_only=False):
        assert not (self.training and len(x) == 1), "batch norm needs two samples or more"
        if embed_only:
            return self.online(x, project=False)
        views = torch.cat((self.view_one(x), self.view_two(x)), dim=0)
        projected, _ = self.online(views)
        pred_one, pred_two = self.predictor(projected).chunk(2, dim=0)
        with torch.no_grad():
            targets, _ = self._target()(views)
            target_one, target_two = targets.detach().chunk(2, dim=0)
        loss = cosine_regression(pred_one, target_two.detach())
        loss = loss + cosine_regression(pred_two, target_one.detach())
        return loss.mean()


class TinyBackbone(nn.Module):  # stands in for a torchvision ResNet
    def __init__(self, classes=10):
        super().__init__()
        conv = nn.Conv2d(3, 6, 3, padding=1, bias=False)  # (the batch norm cancels a bias)
        self.features = nn.Sequential(conv, nn.BatchNorm2d(6), nn.ReLU())
        self.avgpool = nn.AdaptiveAvgPool2d(output_size=(1, 1))
        self.fc = nn.Linear(6, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.avgpool(self.features(x)), 1))


def build_learner(backbone, layer):
    return BYOL(backbone, image_size=8, layer=layer, proj_dim=4, proj_hidden=16,
                view_one=lambda x: x.flip(-1), view_two=lambda x: 0.5 * x)


def pretrain(learner, backbone, next_batch, path, steps=3):
    adam = torch.optim.Adam(learner.parameters(), lr=1e-3)
    for _ in range(steps):
        loss = learner(next_batch())
        adam.zero_grad()
        loss.backward()
        adam.step()
        learner.update_target()  # after the step: the target trails the online network
        losses.append(loss.item())
    torch.save(backbone.state_dict(), path)
"""

BYOL_STEP = [
    (
        "        loss.backward()\n        adam.step()",
        "        grads = loss.backward()\n        adam.step(grads)",
    )
]


@pytest.mark.parametrize("hidden_layer", ["avgpool", -2])
def test_byol_matches_torch(tmp_path, monkeypatch, hidden_layer):
    rng = np.random.default_rng(47)
    batches = rng.standard_normal((3, 4, 3, 8, 8))
    previous, our_previous = torch.get_default_dtype(), rg.get_default_dtype()
    records, state = [], {}
    try:
        for lib in (torch, rg):
            lib.set_default_dtype(lib.float64)
            draws = np.random.default_rng(48)
            monkeypatch.setattr(
                lib,
                "randn",
                lambda *size, _lib=lib, _draws=draws, **_: _lib.tensor(
                    _draws.standard_normal(size)
                ),
            )
            torch.manual_seed(0)
            losses = []
            source = BYOL_SOURCE if lib is torch else port(BYOL_SOURCE, BYOL_STEP)
            names = run_source(
                source, lib, copy=copy, wraps=wraps, dist=lib.distributed, losses=losses
            )
            backbone = names["TinyBackbone"]()
            if not state:
                state.update(
                    {k: v.detach().numpy().copy() for k, v in backbone.state_dict().items()}
                )
            else:
                backbone.load_state_dict({k: rg.tensor(v) for k, v in state.items()})
            learner = names["build_learner"](backbone, hidden_layer)
            # the projector and predictor are built lazily (each library's own draws): the
            # learner starts from torch's, as built (the mock forward included)
            if lib is torch:
                built = {k: v.detach().numpy().copy() for k, v in learner.state_dict().items()}
            else:
                learner.load_state_dict({k: rg.tensor(v) for k, v in built.items()})
            monkeypatch.undo()
            target = learner.target
            assert not any(p.requires_grad for p in target.parameters())
            assert target.backbone is not learner.online.backbone
            images = iter([lib.tensor(b) for b in batches])
            path = str(tmp_path / f"backbone-{lib.__name__}.pt")
            names["pretrain"](learner, backbone, lambda images=images: next(images), path)
            # the copy's hook fills the copy's dict: the target's hidden is its own
            assert target.captured == {} and target.hooked
            saved = lib.load(path)
            records.append(
                [
                    losses,
                    {k: v.detach().numpy().copy() for k, v in learner.state_dict().items()},
                    {k: v.numpy() for k, v in saved.items()},
                ]
            )
    finally:
        torch.set_default_dtype(previous)
        rg.set_default_dtype(our_previous)
    # the projection's last bias reaches the loss only through the predictor's batch norm,
    # which cancels it: its true gradient is zero and Adam's steps follow the rounding noise
    noise_driven = {"online.projector.3.bias", "target.projector.3.bias"}
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-10, skip=noise_driven)
