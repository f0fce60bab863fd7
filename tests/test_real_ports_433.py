"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
a program written here in the style of lucidrains/ema-pytorch: an exponential-moving-average
wrapper shadowing a small classifier trained by Adam, against torch's run of the same program
from the same weights and batches.

- construction: ``deepcopy`` of the online model or a callable returning the EMA model (made
  lazily, at the first update), ``p.detach_()`` of every EMA parameter,
  ``torch.is_floating_point``/``torch.is_complex`` choosing the averaged names (BatchNorm's
  int64 ``num_batches_tracked`` left out), ``register_buffer('initted', torch.tensor(False))``
  and ``register_buffer('step', torch.tensor(0))``, ``functools.partial`` of the in-place
  helpers, the online model kept in the module tree or hidden in a list;
- ``update``: ``self.step.item()``, ``self.step += 1`` on the int64 buffer,
  ``self.initted.data.copy_(torch.tensor(True))``, plain copies until ``update_after_step``,
  an average every ``update_every`` steps and the online model pulled toward its average every
  few steps;
- the decay on tensors: ``(self.step - after - 1).clamp(min=0.)`` (an int64 tensor clamped by a
  float: float32, as torch promotes), ``** -self.power``, ``value.clamp(min=..., max=...)
  .item()``;
- the average under ``@torch.no_grad()``: ``tgt.lerp_(src, weight)`` one tensor at a time, or
  ``torch._foreach_copy_``/``torch._foreach_lerp_`` over ``zip(*pairs)`` tuples, names copied
  rather than averaged, names and name prefixes skipped, float32 weights cast into a float64
  EMA model;
- ``optimizer.register_step_post_hook`` driving the updates (and its handle's ``remove()``),
  an evaluation forward under ``@torch.no_grad()`` restoring the training flag, ``eval()``, the
  ``state_dict()`` of the whole wrapper (online model, EMA model, ``initted``, ``step``).

What stands in: random features and labels. The port changes the import lines and the gradient
lines; ``initialize`` gives it torch's initial weights.
"""

import random

import numpy as np
import torch

from real_ports import assert_records_agree, initializer, runs_with_draws

EMA_SOURCE = """
import functools
from copy import deepcopy
from itertools import chain

import torch
from torch import nn, Tensor
from torch.nn import Module


def _assign(tgt: Tensor, src: Tensor, *, cast: bool):
    tgt.copy_(src.to(tgt.dtype) if cast else src)


def _blend(tgt: Tensor, src: Tensor, weight: float, *, cast: bool):
    tgt.lerp_(src.to(tgt.dtype) if cast else src, weight)


def _averageable(t):
    return torch.is_floating_point(t) or torch.is_complex(t)


class ShadowAverage(Module):
    def __init__(self, model, ema_model=None, beta=0.999, update_after_step=100, update_every=10,
                 power=2 / 3, min_value=0.0, use_foreach=False, coerce_dtype=False,
                 include_online_model=True, copy_names=(), skip_names=(), skip_prefixes=(),
                 pull_model_every=None, pull_beta=0.0):
        super().__init__()
        self.beta, self.power, self.min_value = beta, power, min_value
        self.update_after_step, self.update_every = update_after_step, update_every
        self.use_foreach, self.coerce_dtype = use_foreach, coerce_dtype
        self.copy_names, self.skip_names = set(copy_names), set(skip_names)
        self.skip_prefixes = tuple(skip_prefixes)
        self.pull_model_every, self.pull_beta = pull_model_every, pull_beta
        # a list hides the online model from the module tree (and the state dict)
        self.online_model = model if include_online_model else [model]
        self.assign = functools.partial(_assign, cast=coerce_dtype)
        self.blend = functools.partial(_blend, cast=coerce_dtype)
        made_later = callable(ema_model) and not isinstance(ema_model, Module)
        self.factory = ema_model if made_later else None
        if self.factory is None:
            self.build(ema_model if ema_model is not None else deepcopy(model))
        self.register_buffer("initted", torch.tensor(False))
        self.register_buffer("step", torch.tensor(0))

    @property
    def model(self):
        return self.online_model if isinstance(self.online_model, Module) else self.online_model[0]

    def build(self, ema_model):
        self.ema_model = ema_model
        for p in ema_model.parameters():
            p.detach_()
        tensors = chain(ema_model.named_parameters(), ema_model.named_buffers())
        self.averaged = {name for name, t in tensors if _averageable(t)}

    def pairs(self, dst_model, src_model):
        sources = dict(chain(src_model.named_parameters(), src_model.named_buffers()))
        for name, dst in chain(dst_model.named_parameters(), dst_model.named_buffers()):
            skipped = name in self.skip_names or name.startswith(self.skip_prefixes)
            if name in self.averaged and not skipped:
                yield name, dst, sources[name]

    def decay(self):
        t = (self.step - self.update_after_step - 1).clamp(min=0.0)
        if t.item() <= 0:
            return 0.0
        value = 1 - (1 + t) ** -self.power
        return value.clamp(min=self.min_value, max=self.beta).item()

    @torch.no_grad()
    def copy_from_model(self):
        for _, dst, src in self.pairs(self.ema_model, self.model):
            self.assign(dst.data, src.data)

    @torch.no_grad()
    def average_into(self, dst_model, src_model, decay):
        copies, blends = [], []
        for name, dst, src in self.pairs(dst_model, src_model):
            if self.coerce_dtype:
                src = src.to(dst.dtype)
            (copies if name in self.copy_names else blends).append((dst, src))
        if not self.use_foreach:
            for dst, src in copies:
                self.assign(dst, src)
            for dst, src in blends:
                self.blend(dst, src, 1.0 - decay)
            return
        if copies:
            dsts, srcs = zip(*copies)
            torch._foreach_copy_(dsts, srcs)
        if blends:
            dsts, srcs = zip(*blends)
            torch._foreach_lerp_(dsts, srcs, 1.0 - decay)

    def update(self):
        if self.factory is not None:  # the EMA model is made at the first update
            self.build(self.factory())
            self.factory = None
        step = self.step.item()
        self.step += 1
        if step % self.update_every:
            return
        if step <= self.update_after_step:
            self.copy_from_model()
            return
        if not self.initted.item():
            self.copy_from_model()
            self.initted.data.copy_(torch.tensor(True))  # averaging from now on
        self.average_into(self.ema_model, self.model, self.decay())
        if self.pull_model_every and step % self.pull_model_every == 0:
            self.average_into(self.model, self.ema_model, self.pull_beta)

    def hook_into(self, optimizer):
        return optimizer.register_step_post_hook(lambda *_: self.update())

    @torch.no_grad()
    def evaluate(self, *args, **kwargs):
        was_training = self.ema_model.training
        self.ema_model.eval()
        result = self.ema_model(*args, **kwargs)
        self.ema_model.train(was_training)
        return result

    def forward(self, *inputs, **options):
        return self.ema_model(*inputs, **options)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 12, bias=False), nn.BatchNorm1d(12), nn.ReLU(),
                                 nn.Linear(12, 3))
        self.temperature = nn.Parameter(torch.ones(3))

    def forward(self, x):
        return self.net(x) * self.temperature


data = [(torch.randn(8, 6), torch.randint(0, 3, (8,))) for _ in range(4)]
held_out = torch.randn(5, 6)
xent = nn.CrossEntropyLoss()


def fit(model, optimizer, shadow, steps, hooked=False):
    for i in range(steps):
        x, y = data[i % len(data)]
        model.train()
        loss = xent(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if not hooked:
            shadow.update()
        record.append(loss.item())
        record.append(shadow.decay())
        record.append({k: v.detach().numpy().copy()
                       for k, v in shadow.ema_model.state_dict().items()})


def fresh():
    model = Classifier()
    initialize(model)
    return model, torch.optim.Adam(model.parameters(), lr=0.05)


# warmup, then an average every other step, one lerp_ at a time
model, optimizer = fresh()
shadow = ShadowAverage(model, beta=0.9, update_after_step=2, update_every=2, power=3 / 4)
fit(model, optimizer, shadow, 8)
record += [sorted(shadow.state_dict().keys()), shadow.step.item(), bool(shadow.initted)]
record.append(shadow.evaluate(held_out).numpy())
record.append(shadow.ema_model.training)
shadow.eval()
with torch.no_grad():
    record.append(shadow(held_out).numpy())

# foreach; some names copied or skipped; the online model outside the state dict and pulled
# toward the average; a post-step hook drives the updates
model, optimizer = fresh()
shadow = ShadowAverage(model, beta=0.95, update_after_step=1, update_every=1, use_foreach=True,
                       copy_names={"net.1.running_var"}, skip_names={"temperature"},
                       skip_prefixes={"net.3."}, include_online_model=False, pull_model_every=3,
                       pull_beta=0.5)
handle = shadow.hook_into(optimizer)
fit(model, optimizer, shadow, 7, hooked=True)
handle.remove()
record.append(sorted(shadow.state_dict().keys()))
record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})

# a float64 EMA model from a callable, made at the first update, float32 weights cast into it
model, optimizer = fresh()
shadow = ShadowAverage(model, ema_model=lambda: deepcopy(model).double(), beta=0.8,
                       update_after_step=0, update_every=1, coerce_dtype=True, use_foreach=True)
fit(model, optimizer, shadow, 4)
record.append(str(next(shadow.ema_model.parameters()).dtype).replace("torch.", ""))
"""

EMA_STEPS = [
    (
        "import torch\nfrom torch import nn, Tensor\nfrom torch.nn import Module\n",
        "import retrograd as torch\nfrom retrograd import nn, Tensor\n"
        "from retrograd.nn import Module\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_ema_wrapper_shadows_training_as_torch(capsys):
    """Three EMA set-ups over one classifier: the losses, the decays, the EMA model's
    state after every step, the wrapper's state-dict keys, the averaged model's outputs and the
    online model pulled toward its average agree with torch's."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    (theirs, ours), _ = runs_with_draws(
        EMA_SOURCE, EMA_STEPS, capsys, 43301, initialize=initializer()
    )
    assert theirs[1] == 0.0 and theirs[7] == 0.0  # the warmup: no decay until update_after_step
    assert "online_model.net.0.weight" in theirs[24] and "step" in theirs[24]
    assert theirs[25:27] == [8, True] and theirs[28] is True  # (forward_eval kept train mode)
    assert not any(key.startswith("online_model") for key in theirs[51])
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-5)
