# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
training utilities users write on torch's base classes, in one small training run checked
against torch's run of the same code:

- ``LinearFunction`` and its ``Linear`` module as PyTorch's "Extending PyTorch" note writes
  them (``docs/source/notes/extending.rst``): ``ctx.save_for_backward(input, weight, bias)``
  with ``bias`` possibly ``None``, ``output += bias.unsqueeze(0).expand_as(output)``, the
  backward computing only what ``ctx.needs_input_grad[i]`` asks for (the stem's input needs
  none; the tuples each backward saw are recorded), ``self.register_parameter('bias', None)``
  and ``self.weight.data.uniform_(-0.1, 0.1)``; and the note's ``mark_non_differentiable``
  example (``torch.autograd.Function`` docs): ``sorted, idx = x.sort()``,
  ``ctx.mark_non_differentiable(idx)``, a backward taking ``g1, g2`` and returning
  ``torch.zeros_like(x).index_add_(0, idx, g1)``, its index output reused to gather;
- ``torch.utils.checkpoint.checkpoint(block, x, use_reentrant=...)`` in a model's forward
  when ``self.gradient_checkpointing and self.training`` (the pattern of
  huggingface/transformers' models), both ``use_reentrant=True`` and ``False``, the blocks
  made of the ``Linear`` above;
- ``WarmupCosineSchedule`` as jeonsworld/ViT-pytorch writes it (``utils/scheduler.py``: a
  ``LambdaLR`` subclass passing its bound ``self.lr_lambda``), and its ``train.py`` step:
  ``loss / args.gradient_accumulation_steps``, the step on ``(step + 1) %
  args.gradient_accumulation_steps == 0`` after ``torch.nn.utils.clip_grad_norm_``, with
  ``scheduler.step()`` before ``optimizer.step()`` (as the program has it);
- ``WarmupMultiStepLR`` as facebookresearch/maskrcnn-benchmark writes it
  (``maskrcnn_benchmark/solver/lr_scheduler.py``): an ``_LRScheduler`` subclass whose
  ``get_lr`` reads ``self.last_epoch`` and ``self.base_lrs`` with ``bisect_right`` of the
  milestones, linear and constant warmup;
- an EMA of the weights by ``torch.optim.swa_utils.AveragedModel(model,
  multi_avg_fn=get_ema_multi_avg_fn(0.9))`` updated after each step, evaluated after
  ``torch.optim.swa_utils.update_bn(loader, ema)``.

The lines changed: the ``import`` lines; the gradient lines (``g = loss.backward()`` summed
into ``grads`` over the accumulated micro-batches, ``clip_grad_norm_(grads,
model.parameters(), ...)``, ``optimizer.step(grads)``, ``grads = None`` for ``zero_grad()``),
as the gradients are a value here. The model and the loop around the programs' lines are
written for the test.
"""

from __future__ import annotations

import random
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, port, run_source

EXTENDING_SOURCE = '''
import math
from bisect import bisect_right

import torch
from torch.autograd import Function
from torch.optim.lr_scheduler import LambdaLR
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn, update_bn
from torch.utils.checkpoint import checkpoint

seen = []


# Inherit from Function
class LinearFunction(Function):

    # Note that forward, setup_context, and backward are @staticmethods
    @staticmethod
    def forward(ctx, input, weight, bias=None):
        ctx.save_for_backward(input, weight, bias)
        output = input.mm(weight.t())
        if bias is not None:
            output += bias.unsqueeze(0).expand_as(output)
        return output

    # This function has only a single output, so it gets only one gradient
    @staticmethod
    def backward(ctx, grad_output):
        # This is a pattern that is very convenient - at the top of backward
        # unpack saved_tensors and initialize all gradients w.r.t. inputs to
        # None. Thanks to the fact that additional trailing Nones are
        # ignored, the return statement is simple even when the function has
        # optional inputs.
        input, weight, bias = ctx.saved_tensors
        grad_input = grad_weight = grad_bias = None
        seen.append(tuple(ctx.needs_input_grad))

        # These needs_input_grad checks are optional and there only to
        # improve efficiency. If you want to make your code simpler, you can
        # skip them. Returning gradients for inputs that don't require it is
        # not an error.
        if ctx.needs_input_grad[0]:
            grad_input = grad_output.mm(weight)
        if ctx.needs_input_grad[1]:
            grad_weight = grad_output.t().mm(input)
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(0)

        return grad_input, grad_weight, grad_bias


class Linear(nn.Module):
    def __init__(self, input_features, output_features, bias=True):
        super().__init__()
        self.input_features = input_features
        self.output_features = output_features

        # nn.Parameter is a special kind of Tensor, that will get
        # automatically registered as Module's parameter once it's assigned
        # as an attribute. Parameters and buffers need to be registered, or
        # they won't appear in .parameters() (doesn't apply to buffers), and
        # won't be converted when e.g. .cuda() is called. You can use
        # .register_buffer() to register buffers.
        # nn.Parameters require gradients by default.
        self.weight = nn.Parameter(torch.empty(output_features, input_features))
        if bias:
            self.bias = nn.Parameter(torch.empty(output_features))
        else:
            # You should always register all possible parameters, but the
            # optional ones can be None if you want.
            self.register_parameter('bias', None)

        # Not a very smart way to initialize weights
        nn.init.uniform_(self.weight, -0.1, 0.1)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -0.1, 0.1)

    def forward(self, input):
        # See the autograd section for explanation of what happens here.
        return LinearFunction.apply(input, self.weight, self.bias)

    def extra_repr(self):
        # (Optional)Set the extra information about this module. You can test
        # it by printing an object of this class.
        return 'input_features={}, output_features={}, bias={}'.format(
            self.input_features, self.output_features, self.bias is not None
        )


class Func(Function):
    @staticmethod
    def forward(ctx, x):
        sorted, idx = x.sort()
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(x, idx)
        return sorted, idx

    @staticmethod
    def backward(ctx, g1, g2):  # still need to accept g2
        x, idx = ctx.saved_tensors
        grad_input = torch.zeros_like(x)
        grad_input.index_add_(0, idx, g1)
        return grad_input


class WarmupCosineSchedule(LambdaLR):
    """ Linear warmup and then cosine decay.
        Linearly increases learning rate from 0 to 1 over `warmup_steps` training steps.
        Decreases learning rate from 1. to 0. over remaining `t_total - warmup_steps` steps following a cosine curve.
        If `cycles` (default=0.5) is different from default, learning rate follows cosine function after warmup.
    """
    def __init__(self, optimizer, warmup_steps, t_total, cycles=.5, last_epoch=-1):
        self.warmup_steps = warmup_steps
        self.t_total = t_total
        self.cycles = cycles
        super(WarmupCosineSchedule, self).__init__(optimizer, self.lr_lambda, last_epoch=last_epoch)

    def lr_lambda(self, step):
        if step < self.warmup_steps:
            return float(step) / float(max(1.0, self.warmup_steps))
        # progress after warmup
        progress = float(step - self.warmup_steps) / float(max(1, self.t_total - self.warmup_steps))
        return max(0.0, 0.5 * (1. + math.cos(math.pi * float(self.cycles) * 2.0 * progress)))


class WarmupMultiStepLR(torch.optim.lr_scheduler._LRScheduler):
    def __init__(
        self,
        optimizer,
        milestones,
        gamma=0.1,
        warmup_factor=1.0 / 3,
        warmup_iters=500,
        warmup_method="linear",
        last_epoch=-1,
    ):
        if not list(milestones) == sorted(milestones):
            raise ValueError(
                "Milestones should be a list of" " increasing integers. Got {}",
                milestones,
            )

        if warmup_method not in ("constant", "linear"):
            raise ValueError(
                "Only 'constant' or 'linear' warmup_method accepted"
                "got {}".format(warmup_method)
            )
        self.milestones = milestones
        self.gamma = gamma
        self.warmup_factor = warmup_factor
        self.warmup_iters = warmup_iters
        self.warmup_method = warmup_method
        super(WarmupMultiStepLR, self).__init__(optimizer, last_epoch)

    def get_lr(self):
        warmup_factor = 1
        if self.last_epoch < self.warmup_iters:
            if self.warmup_method == "constant":
                warmup_factor = self.warmup_factor
            elif self.warmup_method == "linear":
                alpha = float(self.last_epoch) / self.warmup_iters
                warmup_factor = self.warmup_factor * (1 - alpha) + alpha
        return [
            base_lr
            * warmup_factor
            * self.gamma ** bisect_right(self.milestones, self.last_epoch)
            for base_lr in self.base_lrs
        ]


# -- the model and the loop, written for the test around the programs' lines --
class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = Linear(width, width)
        self.norm = nn.BatchNorm1d(width)

    def forward(self, x):
        return x + torch.tanh(self.norm(self.fc(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = Linear(5, 6)
        self.blocks = nn.ModuleList([Block(6) for _ in range(2)])
        self.head = Linear(6, 3, bias=False)
        self.scale = nn.Parameter(torch.linspace(-1.0, 1.0, 6))
        self.gradient_checkpointing = True

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            if self.gradient_checkpointing and self.training:
                x = checkpoint(block, x, use_reentrant=args.use_reentrant)
            else:
                x = block(x)
        sorted, idx = Func.apply(self.scale)
        return self.head(x * sorted + x[:, idx] * 0.5)


model = Net()
initialize(model)
record.append(repr(model.head))
optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=0.9)
if args.scheduler == "cosine":
    scheduler = WarmupCosineSchedule(optimizer, warmup_steps=args.warmup_steps, t_total=args.num_steps)
else:
    scheduler = WarmupMultiStepLR(optimizer, milestones=[3, 5], gamma=0.5, warmup_factor=0.25, warmup_iters=args.warmup_steps, warmup_method=args.warmup_method)
ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
loss_fct = nn.CrossEntropyLoss()

model.zero_grad()
global_step = 0
while True:
    model.train()
    for step, batch in enumerate(data):
        x, y = batch
        loss = loss_fct(model(x), y)
        if args.gradient_accumulation_steps > 1:
            loss = loss / args.gradient_accumulation_steps
        loss.backward()

        if (step + 1) % args.gradient_accumulation_steps == 0:
            record.append(loss.item()*args.gradient_accumulation_steps)
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            scheduler.step()
            optimizer.step()
            optimizer.zero_grad()
            global_step += 1
            ema.update_parameters(model)
            record.append(params_of(model))
            record.append(scheduler.get_last_lr())
            if global_step % args.num_steps == 0:
                break
    if global_step % args.num_steps == 0:
        break

record.append(sorted(set(seen)))
update_bn([x for x, _ in data], ema)
ema.eval()
with torch.no_grad():
    record.append(loss_fct(ema(data[0][0]), data[0][1]).item())
record.append(params_of(ema))
record.append({k: v.numpy().copy() for k, v in ema.state_dict().items() if "running" in k})
'''

EXTENDING_STEPS = [
    ("\nimport torch\n", "\nimport retrograd as torch\n"),
    ("from torch.autograd import Function", "from retrograd.autograd import Function"),
    ("model.zero_grad()\nglobal_step = 0\n", "model.zero_grad()\nglobal_step = 0\ngrads = None\n"),
    (
        "        loss.backward()\n",
        "        g = loss.backward()\n        grads = g if grads is None else grads + g\n",
    ),
    (
        "clip_grad_norm_(model.parameters(), args.max_grad_norm)",
        "clip_grad_norm_(grads, model.parameters(), args.max_grad_norm)",
    ),
    (
        "            optimizer.step()\n            optimizer.zero_grad()\n",
        "            optimizer.step(grads)\n            grads = None\n",
    ),
]


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


@pytest.mark.parametrize(
    ("use_reentrant", "scheduler", "warmup_method"),
    [(True, "cosine", None), (False, "multistep", "linear"), (False, "multistep", "constant")],
)
def test_extending_pytorch_trains_as_torch(use_reentrant, scheduler, warmup_method):
    rng = np.random.default_rng(8601)
    batches = [
        (rng.standard_normal((6, 5)).astype(np.float32), rng.integers(0, 3, 6)) for _ in range(4)
    ]
    args = types.SimpleNamespace(
        use_reentrant=use_reentrant,
        scheduler=scheduler,
        warmup_method=warmup_method,
        learning_rate=0.1,
        warmup_steps=2,
        num_steps=6,
        gradient_accumulation_steps=2,
        max_grad_norm=1.0,
    )
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        record = []
        text = (
            EXTENDING_SOURCE
            if lib is torch
            else port(EXTENDING_SOURCE, EXTENDING_STEPS).replace("from torch.", "from retrograd.")
        )
        data = [(lib.tensor(x), lib.tensor(y)) for x, y in batches]
        run_source(
            text,
            lib,
            record=record,
            data=data,
            args=args,
            initialize=initialize,
            params_of=params_of,
        )
        records.append(record)
    theirs, ours = records
    assert len(theirs) == 1 + 6 * 3 + 4
    assert theirs[0] == "Linear(input_features=6, output_features=3, bias=False)"
    # the stem's input needs no gradient; the blocks' inputs do
    assert theirs[-4] == [(False, True, True), (True, True, False), (True, True, True)]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


def test_reentrant_checkpoint_of_inputs_needing_no_gradient_is_torchs():
    """torch's reentrant ``checkpoint`` (``use_reentrant=True``, its default when not given):
    an output that does not require grad, with a warning, when no input does (the first block
    of a model checkpointed on the data: its parameters get no gradient, which transformers'
    ``enable_input_require_grads`` exists to avoid); here the gradient flowed. Keyword
    arguments are refused (``ValueError``, as torch's)."""
    for lib in (torch, rg):
        linear = lib.nn.Linear(2, 2)
        x = lib.ones(1, 2)
        with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
            out = lib.utils.checkpoint.checkpoint(linear, x, use_reentrant=True)
        assert not out.requires_grad
        with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
            assert not lib.utils.checkpoint.checkpoint(linear, x).requires_grad
        assert lib.utils.checkpoint.checkpoint(linear, x, use_reentrant=False).requires_grad
        wanting = lib.ones(1, 2, requires_grad=True)
        assert lib.utils.checkpoint.checkpoint(linear, wanting, use_reentrant=True).requires_grad
        with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
            lib.utils.checkpoint.checkpoint(
                lambda a, scale: a * scale, wanting, scale=2.0, use_reentrant=True
            )
