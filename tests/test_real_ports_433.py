# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
lucidrains/ema-pytorch's ``EMA`` (``ema_pytorch/ema_pytorch.py`` whole) shadowing a small
classifier trained by Adam, against torch's run of the same code from the same weights and
batches.

- ``EMA.__init__``/``init_ema``: ``deepcopy(self.model)`` or a callable returning the EMA
  model, ``p.detach_()`` of every EMA parameter, ``torch.is_floating_point``/``torch.is_complex``
  choosing the parameter and buffer names (BatchNorm's int64 ``num_batches_tracked`` left
  out), ``register_buffer('initted', torch.tensor(False))`` and ``register_buffer('step',
  torch.tensor(0))``, ``functools.partial`` of the in-place helpers, the online model kept in
  the module tree (``include_online_model``) or hidden in a list, ``lazy_init_ema``;
- ``update``: ``self.step.item()``, ``self.step += 1`` on the int64 buffer,
  ``self.initted.data.copy_(torch.tensor(True))``, the copy before ``update_after_step``, the
  moving average every ``update_every`` steps and the model pulled toward its average every
  ``update_model_with_ema_every`` (``update_model_with_ema`` with a beta);
- ``get_current_decay`` on tensors: ``(self.step - self.update_after_step - 1).clamp(min =
  0.)`` (an int64 tensor clamped by a float: float32, as torch promotes), ``** - self.power``,
  ``value.clamp(min = ..., max = self.beta).item()``;
- ``update_moving_average`` under ``@torch.no_grad()``: ``tgt.lerp_(src, weight)`` one tensor
  at a time, or ``torch._foreach_copy_``/``torch._foreach_lerp_`` over ``zip(*pairs)`` tuples
  (``use_foreach``), ``param_or_buffer_names_no_ema`` copied, ``ignore_names`` and
  ``ignore_startswith_names`` skipped, ``coerce_dtype`` casting float32 weights into a
  float64 EMA model;
- ``add_to_optimizer_post_step_hook`` (``optimizer.register_step_post_hook``),
  ``forward_eval`` under ``@torch.no_grad()`` restoring the training flag, ``eval()``, the
  ``state_dict()`` of the whole wrapper (online model, EMA model, ``initted``, ``step``).

What stands in: random features and labels. The port changes the import lines and the gradient
lines; ``initialize`` gives it torch's initial weights.
"""

from __future__ import annotations

import random

import numpy as np
import torch

from real_ports import assert_records_agree, initializer, runs_with_draws

EMA_SOURCE = '''
from __future__ import annotations
from typing import Callable

from copy import deepcopy
from functools import partial

import torch
from torch import nn, Tensor
from torch.nn import Module

def exists(val):
    return val is not None

def divisible_by(num, den):
    return (num % den) == 0

def get_module_device(m: Module):
    return next(m.parameters()).device

def maybe_coerce_dtype(t, dtype):
    if t.dtype == dtype:
        return t

    return t.to(dtype)

def inplace_copy(tgt: Tensor, src: Tensor, *, auto_move_device = False, coerce_dtype = False):
    if auto_move_device:
        src = src.to(tgt.device)

    if coerce_dtype:
        src = maybe_coerce_dtype(src, tgt.dtype)

    tgt.copy_(src)

def inplace_lerp(tgt: Tensor, src: Tensor, weight, *, auto_move_device = False, coerce_dtype = False):
    if auto_move_device:
        src = src.to(tgt.device)

    if coerce_dtype:
        src = maybe_coerce_dtype(src, tgt.dtype)

    tgt.lerp_(src, weight)

class EMA(Module):
    """
    Implements exponential moving average shadowing for your model.

    Utilizes an inverse decay schedule to manage longer term training runs.
    By adjusting the power, you can control how fast EMA will ramp up to your specified beta.

    @crowsonkb's notes on EMA Warmup:

    If gamma=1 and power=1, implements a simple average. gamma=1, power=2/3 are
    good values for models you plan to train for a million or more steps (reaches decay
    factor 0.999 at 31.6K steps, 0.9999 at 1M steps), gamma=1, power=3/4 for models
    you plan to train for less (reaches decay factor 0.999 at 10K steps, 0.9999 at
    215.4k steps).

    Args:
        inv_gamma (float): Inverse multiplicative factor of EMA warmup. Default: 1.
        power (float): Exponential factor of EMA warmup. Default: 2/3.
        min_value (float): The minimum EMA decay rate. Default: 0.
    """

    def __init__(
        self,
        model: Module,
        ema_model: Module | Callable[[], Module] | None = None,             # if your model has lazylinears or other types of non-deepcopyable modules, you can pass in your own ema model
        beta = 0.9999,
        update_after_step = 100,
        update_every = 10,
        inv_gamma = 1.0,
        power = 2 / 3,
        min_value = 0.0,
        param_or_buffer_names_no_ema: set[str] = set(),
        ignore_names: set[str] = set(),
        ignore_startswith_names: set[str] = set(),
        include_online_model = True,                  # set this to False if you do not wish for the online model to be saved along with the ema model (managed externally)
        allow_different_devices = False,              # if the EMA model is on a different device (say CPU), automatically move the tensor
        use_foreach = False,
        update_model_with_ema_every = None,           # update the model with EMA model weights every number of steps, for better continual learning https://arxiv.org/abs/2406.02596
        update_model_with_ema_beta = 0.,              # amount of model weight to keep when updating to EMA (hare to tortoise)
        forward_method_names: tuple[str, ...] = (),
        move_ema_to_online_device = False,
        coerce_dtype = False,
        lazy_init_ema = False,
    ):
        super().__init__()
        self.beta = beta

        self.is_frozen = beta == 1.

        # whether to include the online model within the module tree, so that state_dict also saves it

        self.include_online_model = include_online_model

        if include_online_model:
            self.online_model = model
        else:
            self.online_model = [model] # hack

        # handle callable returning ema module

        if not isinstance(ema_model, Module) and callable(ema_model):
            ema_model = ema_model()

        # ema model

        self.ema_model = None
        self.forward_method_names = forward_method_names

        if not lazy_init_ema:
            self.init_ema(ema_model)
        else:
            assert not exists(ema_model)

        # tensor update functions

        self.inplace_copy = partial(inplace_copy, auto_move_device = allow_different_devices, coerce_dtype = coerce_dtype)
        self.inplace_lerp = partial(inplace_lerp, auto_move_device = allow_different_devices, coerce_dtype = coerce_dtype)

        # updating hyperparameters

        self.update_every = update_every
        self.update_after_step = update_after_step

        self.inv_gamma = inv_gamma
        self.power = power
        self.min_value = min_value

        assert isinstance(param_or_buffer_names_no_ema, (set, list))
        self.param_or_buffer_names_no_ema = param_or_buffer_names_no_ema # parameter or buffer

        self.ignore_names = ignore_names
        self.ignore_startswith_names = ignore_startswith_names

        # continual learning related

        self.update_model_with_ema_every = update_model_with_ema_every
        self.update_model_with_ema_beta = update_model_with_ema_beta

        # whether to manage if EMA model is kept on a different device

        self.allow_different_devices = allow_different_devices

        # whether to coerce dtype when copy or lerp from online to EMA model

        self.coerce_dtype = coerce_dtype

        # whether to move EMA model to online model device automatically

        self.move_ema_to_online_device = move_ema_to_online_device

        # whether to use foreach

        if use_foreach:
            assert hasattr(torch, '_foreach_lerp_') and hasattr(torch, '_foreach_copy_'), 'your version of torch does not have the prerequisite foreach functions'

        self.use_foreach = use_foreach

        # init and step states

        self.register_buffer('initted', torch.tensor(False))
        self.register_buffer('step', torch.tensor(0))

    def init_ema(
        self,
        ema_model: Module | None = None
    ):
        self.ema_model = ema_model

        if not exists(self.ema_model):
            try:
                self.ema_model = deepcopy(self.model)
            except Exception as e:
                print(f'Error: While trying to deepcopy model: {e}')
                print('Your model was not copyable. Please make sure you are not using any LazyLinear')
                exit()

        for p in self.ema_model.parameters():
            p.detach_()

        # forwarding methods

        for forward_method_name in self.forward_method_names:
            fn = getattr(self.ema_model, forward_method_name)
            setattr(self, forward_method_name, fn)

        # parameter and buffer names

        self.parameter_names = {name for name, param in self.ema_model.named_parameters() if torch.is_floating_point(param) or torch.is_complex(param)}
        self.buffer_names = {name for name, buffer in self.ema_model.named_buffers() if torch.is_floating_point(buffer) or torch.is_complex(buffer)}

    def add_to_optimizer_post_step_hook(self, optimizer):
        assert hasattr(optimizer, 'register_step_post_hook')

        def hook(*_):
            self.update()

        return optimizer.register_step_post_hook(hook)

    @property
    def model(self):
        return self.online_model if self.include_online_model else self.online_model[0]

    def eval(self):
        return self.ema_model.eval()

    @torch.no_grad()
    def forward_eval(self, *args, **kwargs):
        # handy function for invoking ema model with no grad + eval
        training = self.ema_model.training
        out = self.ema_model(*args, **kwargs)
        self.ema_model.train(training)
        return out

    def restore_ema_model_device(self):
        device = self.initted.device
        self.ema_model.to(device)

    def get_params_iter(self, model):
        for name, param in model.named_parameters():
            if name not in self.parameter_names:
                continue
            yield name, param

    def get_buffers_iter(self, model):
        for name, buffer in model.named_buffers():
            if name not in self.buffer_names:
                continue
            yield name, buffer

    def copy_params_from_model_to_ema(self):
        copy = self.inplace_copy

        for (_, ma_params), (_, current_params) in zip(self.get_params_iter(self.ema_model), self.get_params_iter(self.model)):
            copy(ma_params.data, current_params.data)

        for (_, ma_buffers), (_, current_buffers) in zip(self.get_buffers_iter(self.ema_model), self.get_buffers_iter(self.model)):
            copy(ma_buffers.data, current_buffers.data)

    def copy_params_from_ema_to_model(self):
        copy = self.inplace_copy

        for (_, ma_params), (_, current_params) in zip(self.get_params_iter(self.ema_model), self.get_params_iter(self.model)):
            copy(current_params.data, ma_params.data)

        for (_, ma_buffers), (_, current_buffers) in zip(self.get_buffers_iter(self.ema_model), self.get_buffers_iter(self.model)):
            copy(current_buffers.data, ma_buffers.data)

    def update_model_with_ema(self, decay = None):
        if not exists(decay):
            decay = self.update_model_with_ema_beta

        if decay == 0.:
            return self.copy_params_from_ema_to_model()

        self.update_moving_average(self.model, self.ema_model, decay)

    def get_current_decay(self):
        epoch = (self.step - self.update_after_step - 1).clamp(min = 0.)
        value = 1 - (1 + epoch / self.inv_gamma) ** - self.power

        if epoch.item() <= 0:
            return 0.

        return value.clamp(min = self.min_value, max = self.beta).item()

    def update(self):
        step = self.step.item()
        self.step += 1

        if not self.initted.item():
            if not exists(self.ema_model):
                self.init_ema()

            self.copy_params_from_model_to_ema()
            self.initted.data.copy_(torch.tensor(True))
            return

        should_update = divisible_by(step, self.update_every)

        if should_update and step <= self.update_after_step:
            self.copy_params_from_model_to_ema()
            return

        if should_update:
            self.update_moving_average(self.ema_model, self.model)

        if exists(self.update_model_with_ema_every) and divisible_by(step, self.update_model_with_ema_every):
            self.update_model_with_ema()

    @torch.no_grad()
    def update_moving_average(self, ma_model, current_model, current_decay = None):
        if self.is_frozen:
            return

        # move ema model to online model device if not same and needed

        if self.move_ema_to_online_device and get_module_device(ma_model) != get_module_device(current_model):
            ma_model.to(get_module_device(current_model))

        # get current decay

        if not exists(current_decay):
            current_decay = self.get_current_decay()

        # store all source and target tensors to copy or lerp

        tensors_to_copy = []
        tensors_to_lerp = []

        # loop through parameters

        for (name, current_params), (_, ma_params) in zip(self.get_params_iter(current_model), self.get_params_iter(ma_model)):
            if name in self.ignore_names:
                continue

            if any([name.startswith(prefix) for prefix in self.ignore_startswith_names]):
                continue

            if name in self.param_or_buffer_names_no_ema:
                tensors_to_copy.append((ma_params.data, current_params.data))
                continue

            tensors_to_lerp.append((ma_params.data, current_params.data))

        # loop through buffers

        for (name, current_buffer), (_, ma_buffer) in zip(self.get_buffers_iter(current_model), self.get_buffers_iter(ma_model)):
            if name in self.ignore_names:
                continue

            if any([name.startswith(prefix) for prefix in self.ignore_startswith_names]):
                continue

            if name in self.param_or_buffer_names_no_ema:
                tensors_to_copy.append((ma_buffer.data, current_buffer.data))
                continue

            tensors_to_lerp.append((ma_buffer.data, current_buffer.data))

        # execute inplace copy or lerp

        if not self.use_foreach:

            for tgt, src in tensors_to_copy:
                self.inplace_copy(tgt, src)

            for tgt, src in tensors_to_lerp:
                self.inplace_lerp(tgt, src, 1. - current_decay)

        else:
            # use foreach if available and specified

            if self.allow_different_devices:
                tensors_to_copy = [(tgt, src.to(tgt.device)) for tgt, src in tensors_to_copy]
                tensors_to_lerp = [(tgt, src.to(tgt.device)) for tgt, src in tensors_to_lerp]

            if self.coerce_dtype:
                tensors_to_copy = [(tgt, maybe_coerce_dtype(src, tgt.dtype)) for tgt, src in tensors_to_copy]
                tensors_to_lerp = [(tgt, maybe_coerce_dtype(src, tgt.dtype)) for tgt, src in tensors_to_lerp]

            if len(tensors_to_copy) > 0:
                tgt_copy, src_copy = zip(*tensors_to_copy)
                torch._foreach_copy_(tgt_copy, src_copy)

            if len(tensors_to_lerp) > 0:
                tgt_lerp, src_lerp = zip(*tensors_to_lerp)
                torch._foreach_lerp_(tgt_lerp, src_lerp, 1. - current_decay)

    def __call__(self, *args, **kwargs):
        return self.ema_model(*args, **kwargs)


# -- a training script using it -------------------------------------------------------------
class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 12, bias=False), nn.BatchNorm1d(12), nn.ReLU(), nn.Linear(12, 3))
        self.head_scale = nn.Parameter(torch.ones(3))

    def forward(self, x):
        return self.net(x) * self.head_scale


batches = [(torch.randn(8, 6), torch.randint(0, 3, (8,))) for _ in range(4)]
test_input = torch.randn(5, 6)
loss_fn = nn.CrossEntropyLoss()


def train(model, optimizer, ema, steps, hooked=False):
    for step in range(steps):
        x, y = batches[step % len(batches)]
        model.train()
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if not hooked:
            ema.update()
        record.append(loss.item())
        record.append(ema.get_current_decay())
        record.append({k: v.detach().numpy().copy() for k, v in ema.ema_model.state_dict().items()})


# the README's settings: warmup then an average every few steps, by lerp_
model = Classifier()
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
ema = EMA(model, beta=0.9, update_after_step=2, update_every=2, power=3 / 4)
train(model, optimizer, ema, 8)
record.append(sorted(ema.state_dict().keys()))
record.append(ema.step.item())
record.append(bool(ema.initted))
out = ema.forward_eval(test_input)
record.append(out.numpy())
record.append(ema.ema_model.training)
ema.eval()
with torch.no_grad():
    record.append(ema(test_input).numpy())

# foreach, names kept out of the average, the online model outside the state dict, and the
# model pulled toward its average (a post-step hook drives the updates)
model = Classifier()
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
ema = EMA(model, beta=0.95, update_after_step=1, update_every=1, use_foreach=True,
          param_or_buffer_names_no_ema={"net.1.running_var"}, ignore_names={"head_scale"},
          ignore_startswith_names={"net.3."}, include_online_model=False,
          update_model_with_ema_every=3, update_model_with_ema_beta=0.5)
handle = ema.add_to_optimizer_post_step_hook(optimizer)
train(model, optimizer, ema, 7, hooked=True)
handle.remove()
record.append(sorted(ema.state_dict().keys()))
record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})

# a lazily made float64 EMA model, given by a callable, weights cast into it
model = Classifier()
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
ema = EMA(model, ema_model=lambda: deepcopy(model).double(), beta=0.8, update_after_step=0,
          update_every=1, coerce_dtype=True, use_foreach=True)
train(model, optimizer, ema, 4)
record.append(str(next(ema.ema_model.parameters()).dtype).replace("torch.", ""))
'''

EMA_STEPS = [
    (
        "import torch\nfrom torch import nn, Tensor\nfrom torch.nn import Module\n",
        "import retrograd as torch\nfrom retrograd import nn, Tensor\nfrom retrograd.nn import Module\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_lucidrains_ema_shadows_training_as_torch(capsys):
    """Three EMA set-ups over the same classifier: the losses, the decays, the EMA model's
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
