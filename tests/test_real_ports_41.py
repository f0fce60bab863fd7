# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- BYOL as lucidrains/byol-pytorch writes it (``byol_pytorch/byol_pytorch.py`` and its README's
  training loop), over a small conv net for the ResNet, with the README's
  ``hidden_layer='avgpool'`` (by name) and ``-2`` (by child index): the ``singleton(cache_key)``
  decorator caching the lazily built projector and target encoder on the instance
  (``getattr``/``setattr`` around ``@wraps``); the hidden layer read by
  ``layer.register_forward_hook(self._hook)`` into a dict keyed by ``input[0].device``;
  ``projector.to(hidden)`` (``Module.to`` of a tensor); the mock forward of
  ``torch.randn(2, 3, image_size, image_size, device=device)`` in ``__init__`` that builds
  them; the target encoder made by ``copy.deepcopy(self.online_encoder)`` (its forward hook,
  a bound method of the wrapper, bound to the copy) and frozen by ``p.requires_grad = False``;
  ``MaybeSyncBatchnorm`` asking ``dist.is_initialized()``; ``loss_fn`` by ``F.normalize(x,
  dim=-1, p=2)`` and ``2 - 2 * (x * y).sum(dim=-1)``; ``online_predictions.chunk(2, dim = 0)``;
  the EMA ``ma_params.data = ema_updater.update_average(old_weight, up_weight)``; Adam over
  ``learner.parameters()`` (the frozen target's among them), ``learner.update_moving_average()``
  and ``torch.save(resnet.state_dict(), ...)``.

``torch.randn`` draws from one seeded stream in both runs, in float64. The lines changed: the
gradient lines, and the default augmentation (torchvision's ``T.ColorJitter``... in an
``nn.Sequential``; torchvision is not a dependency here) is left out: the test gives
``augment_fn`` and ``augment_fn2`` (a flip and a scaled copy), as the README allows.

The defect found: ``torch.load`` of a file written by ``torch.save(resnet.state_dict(), path)``
gave NumPy arrays here (a state dict's values are NumPy copies with torch's idioms, saved as
plain arrays); torch gives tensors. ``rg.save`` now stores a state value as the tensor it
stands for, so it loads back as one (``tests/test_realports6_fixes.py``).
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
# helper functions

def default(val, def_val):
    return def_val if val is None else val

def flatten(t):
    return t.reshape(t.shape[0], -1)

def singleton(cache_key):
    def inner_fn(fn):
        @wraps(fn)
        def wrapper(self, *args, **kwargs):
            instance = getattr(self, cache_key)
            if instance is not None:
                return instance

            instance = fn(self, *args, **kwargs)
            setattr(self, cache_key, instance)
            return instance
        return wrapper
    return inner_fn

def get_module_device(module):
    return next(module.parameters()).device

def set_requires_grad(model, val):
    for p in model.parameters():
        p.requires_grad = val

def MaybeSyncBatchnorm(is_distributed = None):
    is_distributed = default(is_distributed, dist.is_initialized() and dist.get_world_size() > 1)
    return nn.SyncBatchNorm if is_distributed else nn.BatchNorm1d

# loss fn

def loss_fn(x, y):
    x = F.normalize(x, dim=-1, p=2)
    y = F.normalize(y, dim=-1, p=2)
    return 2 - 2 * (x * y).sum(dim=-1)

# exponential moving average

class EMA():
    def __init__(self, beta):
        super().__init__()
        self.beta = beta

    def update_average(self, old, new):
        if old is None:
            return new
        return old * self.beta + (1 - self.beta) * new

def update_moving_average(ema_updater, ma_model, current_model):
    for current_params, ma_params in zip(current_model.parameters(), ma_model.parameters()):
        old_weight, up_weight = ma_params.data, current_params.data
        ma_params.data = ema_updater.update_average(old_weight, up_weight)

# MLP class for projector and predictor

def MLP(dim, projection_size, hidden_size=4096, sync_batchnorm=None):
    return nn.Sequential(
        nn.Linear(dim, hidden_size),
        MaybeSyncBatchnorm(sync_batchnorm)(hidden_size),
        nn.ReLU(inplace=True),
        nn.Linear(hidden_size, projection_size)
    )

# a wrapper class for the base neural network
# will manage the interception of the hidden layer output
# and pipe it into the projecter and predictor nets

class NetWrapper(nn.Module):
    def __init__(self, net, projection_size, projection_hidden_size, layer = -2, use_simsiam_mlp = False, sync_batchnorm = None):
        super().__init__()
        self.net = net
        self.layer = layer

        self.projector = None
        self.projection_size = projection_size
        self.projection_hidden_size = projection_hidden_size

        self.use_simsiam_mlp = use_simsiam_mlp
        self.sync_batchnorm = sync_batchnorm

        self.hidden = {}
        self.hook_registered = False

    def _find_layer(self):
        if type(self.layer) == str:
            modules = dict([*self.net.named_modules()])
            return modules.get(self.layer, None)
        elif type(self.layer) == int:
            children = [*self.net.children()]
            return children[self.layer]
        return None

    def _hook(self, _, input, output):
        device = input[0].device
        self.hidden[device] = flatten(output)

    def _register_hook(self):
        layer = self._find_layer()
        assert layer is not None, f'hidden layer ({self.layer}) not found'
        handle = layer.register_forward_hook(self._hook)
        self.hook_registered = True

    @singleton('projector')
    def _get_projector(self, hidden):
        _, dim = hidden.shape
        create_mlp_fn = MLP
        projector = create_mlp_fn(dim, self.projection_size, self.projection_hidden_size, sync_batchnorm = self.sync_batchnorm)
        return projector.to(hidden)

    def get_representation(self, x):
        if self.layer == -1:
            return self.net(x)

        if not self.hook_registered:
            self._register_hook()

        self.hidden.clear()
        _ = self.net(x)
        hidden = self.hidden[x.device]
        self.hidden.clear()

        assert hidden is not None, f'hidden layer {self.layer} never emitted an output'
        return hidden

    def forward(self, x, return_projection = True):
        representation = self.get_representation(x)

        if not return_projection:
            return representation

        projector = self._get_projector(representation)
        projection = projector(representation)
        return projection, representation

# main class

class BYOL(nn.Module):
    def __init__(
        self,
        net,
        image_size,
        hidden_layer = -2,
        projection_size = 256,
        projection_hidden_size = 4096,
        augment_fn = None,
        augment_fn2 = None,
        moving_average_decay = 0.99,
        use_momentum = True,
        sync_batchnorm = None
    ):
        super().__init__()
        self.net = net

        self.augment1 = augment_fn
        self.augment2 = default(augment_fn2, self.augment1)

        self.online_encoder = NetWrapper(
            net,
            projection_size,
            projection_hidden_size,
            layer = hidden_layer,
            use_simsiam_mlp = not use_momentum,
            sync_batchnorm = sync_batchnorm
        )

        self.use_momentum = use_momentum
        self.target_encoder = None
        self.target_ema_updater = EMA(moving_average_decay)

        self.online_predictor = MLP(projection_size, projection_size, projection_hidden_size)

        # get device of network and make wrapper same device
        device = get_module_device(net)
        self.to(device)

        # send a mock image tensor to instantiate singleton parameters
        self.forward(torch.randn(2, 3, image_size, image_size, device=device))

    @singleton('target_encoder')
    def _get_target_encoder(self):
        target_encoder = copy.deepcopy(self.online_encoder)
        set_requires_grad(target_encoder, False)
        return target_encoder

    def reset_moving_average(self):
        del self.target_encoder
        self.target_encoder = None

    def update_moving_average(self):
        assert self.use_momentum, 'you do not need to update the moving average, since you have turned off momentum for the target encoder'
        assert self.target_encoder is not None, 'target encoder has not been created yet'
        update_moving_average(self.target_ema_updater, self.target_encoder, self.online_encoder)

    def forward(
        self,
        x,
        return_embedding = False,
        return_projection = True
    ):
        assert not (self.training and x.shape[0] == 1), 'you must have greater than 1 sample when training, due to the batchnorm in the projection layer'

        if return_embedding:
            return self.online_encoder(x, return_projection = return_projection)

        image_one, image_two = self.augment1(x), self.augment2(x)

        images = torch.cat((image_one, image_two), dim = 0)

        online_projections, _ = self.online_encoder(images)
        online_predictions = self.online_predictor(online_projections)

        online_pred_one, online_pred_two = online_predictions.chunk(2, dim = 0)

        with torch.no_grad():
            target_encoder = self._get_target_encoder() if self.use_momentum else self.online_encoder

            target_projections, _ = target_encoder(images)
            target_projections = target_projections.detach()

            target_proj_one, target_proj_two = target_projections.chunk(2, dim = 0)

        loss_one = loss_fn(online_pred_one, target_proj_two.detach())
        loss_two = loss_fn(online_pred_two, target_proj_one.detach())

        loss = loss_one + loss_two
        return loss.mean()


class SmallNet(nn.Module):  # the test's, for torchvision's resnet50(pretrained=True)
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.relu = nn.ReLU()
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(6, 10)

    def forward(self, x):
        x = self.avgpool(self.relu(self.bn(self.conv(x))))
        return self.fc(torch.flatten(x, 1))


def make_learner(resnet, hidden_layer):  # the README's, smaller
    learner = BYOL(
        resnet,
        image_size = 8,
        hidden_layer = hidden_layer,
        projection_size = 4,
        projection_hidden_size = 16,
        augment_fn = lambda x: x.flip(-1),
        augment_fn2 = lambda x: x * 0.5,
    )
    return learner


def readme(learner, resnet, sample_unlabelled_images, path):
    opt = torch.optim.Adam(learner.parameters(), lr=3e-4)

    for _ in range(3):
        images = sample_unlabelled_images()
        loss = learner(images)
        opt.zero_grad()
        loss.backward()
        opt.step()
        learner.update_moving_average() # update moving average of target encoder
        losses.append(loss.item())

    # save your improved network
    torch.save(resnet.state_dict(), path)
"""

BYOL_STEP = [
    (
        "        loss.backward()\n        opt.step()",
        "        grads = loss.backward()\n        opt.step(grads)",
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
            resnet = names["SmallNet"]()
            if not state:
                state.update({k: v.detach().numpy().copy() for k, v in resnet.state_dict().items()})
            else:
                resnet.load_state_dict({k: rg.tensor(v) for k, v in state.items()})
            learner = names["make_learner"](resnet, hidden_layer)
            # the projector and predictor are built lazily (each library's own draws): the
            # learner starts from torch's, as built (the mock forward included)
            if lib is torch:
                built = {k: v.detach().numpy().copy() for k, v in learner.state_dict().items()}
            else:
                learner.load_state_dict({k: rg.tensor(v) for k, v in built.items()})
            monkeypatch.undo()
            target = learner.target_encoder
            assert not any(p.requires_grad for p in target.parameters())
            assert target.net is not learner.online_encoder.net
            images = iter([lib.tensor(b) for b in batches])
            path = str(tmp_path / f"improved-net-{lib.__name__}.pt")
            names["readme"](learner, resnet, lambda images=images: next(images), path)
            # the copy's hook fills the copy's dict: the target's hidden is its own
            assert target.hidden == {} and target.hook_registered
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
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-10)
