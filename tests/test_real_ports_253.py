# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
DARTS architecture search as quark0/darts writes it: ``cnn/architect.py``'s second-order
``Architect`` (the virtual SGD step on a model rebuilt from the flat parameter vector, the
finite-difference Hessian-vector product on the architecture weights, the architecture
gradient written into ``v.grad`` for its own Adam), ``cnn/model_search.py``'s ``MixedOp`` /
``Cell`` / ``Network`` with its ``alphas`` as plain ``Variable``s outside ``parameters()``,
``operations.py``'s ops, and ``train_search.py``'s loop, against torch's run of the same code
from the same weights and draws. Cut down: the reduction cell keeps the resolution (stride
1, no ``FactorizedReduce``), five primitives, 6x6 inputs; the ``.cuda()`` calls dropped (a CPU run); the removed
``sub(Number, Tensor)``/``add_(Number, Tensor)`` overloads in their keyword form
(``alpha=``), as the maintained forks write them for torch 1.x and later, and
``scheduler.get_last_lr()`` for the removed use of ``get_lr()``.

What it exercises: ``torch.autograd.grad(loss, self.model.parameters())`` and of a list of
non-parameter leaves; ``torch.cat([x.view(-1) for x in xs])``; the ``try``/``except``
around ``network_optimizer.state[v]['momentum_buffer']`` (a KeyError on the first step);
``theta[offset: offset+v_length].view(v.size())`` loaded by ``load_state_dict`` after
``model_dict.update(params)``; ``p.data.add_(v, alpha=R)`` with ``R`` a 0-d tensor;
``g.data.sub_(ig.data, alpha=eta)`` on a gradient; ``x.data.copy_(y.data)``;
``nn.utils.clip_grad_norm`` (the deprecated name); ``sum(w * op(x) ...)`` over ops with a
``Zero`` op (``x.mul(0.)``); ``BatchNorm2d(affine=False)``; ``AvgPool2d(count_include_pad=
False)``; depthwise ``Conv2d(groups=C_in)``.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``;
``v.grad`` read from ``grads``; ``v.grad = ...`` as ``v.grad_replace(grads, ...)``; the
gradients returned to ``Architect.step`` and given to both optimizers and
``clip_grad_norm``).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, runs_with_draws


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


DARTS_SOURCE = """
import torch
import numpy as np
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable

PRIMITIVES = [
    'none',
    'max_pool_3x3',
    'avg_pool_3x3',
    'skip_connect',
    'sep_conv_3x3',
]

OPS = {
  'none' : lambda C, stride, affine: Zero(stride),
  'avg_pool_3x3' : lambda C, stride, affine: nn.AvgPool2d(3, stride=stride, padding=1, count_include_pad=False),
  'max_pool_3x3' : lambda C, stride, affine: nn.MaxPool2d(3, stride=stride, padding=1),
  'skip_connect' : lambda C, stride, affine: Identity(),
  'sep_conv_3x3' : lambda C, stride, affine: SepConv(C, C, 3, stride, 1, affine=affine),
}


class ReLUConvBN(nn.Module):

  def __init__(self, C_in, C_out, kernel_size, stride, padding, affine=True):
    super(ReLUConvBN, self).__init__()
    self.op = nn.Sequential(
      nn.ReLU(inplace=False),
      nn.Conv2d(C_in, C_out, kernel_size, stride=stride, padding=padding, bias=False),
      nn.BatchNorm2d(C_out, affine=affine)
    )

  def forward(self, x):
    return self.op(x)


class SepConv(nn.Module):

  def __init__(self, C_in, C_out, kernel_size, stride, padding, affine=True):
    super(SepConv, self).__init__()
    self.op = nn.Sequential(
      nn.ReLU(inplace=False),
      nn.Conv2d(C_in, C_in, kernel_size=kernel_size, stride=stride, padding=padding, groups=C_in, bias=False),
      nn.Conv2d(C_in, C_in, kernel_size=1, padding=0, bias=False),
      nn.BatchNorm2d(C_in, affine=affine),
      nn.ReLU(inplace=False),
      nn.Conv2d(C_in, C_in, kernel_size=kernel_size, stride=1, padding=padding, groups=C_in, bias=False),
      nn.Conv2d(C_in, C_out, kernel_size=1, padding=0, bias=False),
      nn.BatchNorm2d(C_out, affine=affine),
      )

  def forward(self, x):
    return self.op(x)


class Identity(nn.Module):

  def __init__(self):
    super(Identity, self).__init__()

  def forward(self, x):
    return x


class Zero(nn.Module):

  def __init__(self, stride):
    super(Zero, self).__init__()
    self.stride = stride

  def forward(self, x):
    if self.stride == 1:
      return x.mul(0.)
    return x[:,:,::self.stride,::self.stride].mul(0.)


class MixedOp(nn.Module):

  def __init__(self, C, stride):
    super(MixedOp, self).__init__()
    self._ops = nn.ModuleList()
    for primitive in PRIMITIVES:
      op = OPS[primitive](C, stride, False)
      if 'pool' in primitive:
        op = nn.Sequential(op, nn.BatchNorm2d(C, affine=False))
      self._ops.append(op)

  def forward(self, x, weights):
    return sum(w * op(x) for w, op in zip(weights, self._ops))


class Cell(nn.Module):

  def __init__(self, steps, multiplier, C_prev_prev, C_prev, C, reduction):
    super(Cell, self).__init__()
    self.reduction = reduction
    self.preprocess0 = ReLUConvBN(C_prev_prev, C, 1, 1, 0, affine=False)
    self.preprocess1 = ReLUConvBN(C_prev, C, 1, 1, 0, affine=False)
    self._steps = steps
    self._multiplier = multiplier

    self._ops = nn.ModuleList()
    self._bns = nn.ModuleList()
    for i in range(self._steps):
      for j in range(2+i):
        stride = 1
        op = MixedOp(C, stride)
        self._ops.append(op)

  def forward(self, s0, s1, weights):
    s0 = self.preprocess0(s0)
    s1 = self.preprocess1(s1)

    states = [s0, s1]
    offset = 0
    for i in range(self._steps):
      s = sum(self._ops[offset+j](h, weights[offset+j]) for j, h in enumerate(states))
      offset += len(states)
      states.append(s)

    return torch.cat(states[-self._multiplier:], dim=1)


class Network(nn.Module):

  def __init__(self, C, num_classes, layers, criterion, steps=2, multiplier=2, stem_multiplier=3):
    super(Network, self).__init__()
    self._C = C
    self._num_classes = num_classes
    self._layers = layers
    self._criterion = criterion
    self._steps = steps
    self._multiplier = multiplier

    C_curr = stem_multiplier*C
    self.stem = nn.Sequential(
      nn.Conv2d(1, C_curr, 3, padding=1, bias=False),
      nn.BatchNorm2d(C_curr)
    )

    C_prev_prev, C_prev, C_curr = C_curr, C_curr, C
    self.cells = nn.ModuleList()
    for i in range(layers):
      reduction = i == layers - 1
      cell = Cell(steps, multiplier, C_prev_prev, C_prev, C_curr, reduction)
      self.cells += [cell]
      C_prev_prev, C_prev = C_prev, multiplier*C_curr

    self.global_pooling = nn.AdaptiveAvgPool2d(1)
    self.classifier = nn.Linear(C_prev, num_classes)

    self._initialize_alphas()

  def new(self):
    model_new = Network(self._C, self._num_classes, self._layers, self._criterion)
    for x, y in zip(model_new.arch_parameters(), self.arch_parameters()):
        x.data.copy_(y.data)
    return model_new

  def forward(self, input):
    s0 = s1 = self.stem(input)
    for i, cell in enumerate(self.cells):
      if cell.reduction:
        weights = F.softmax(self.alphas_reduce, dim=-1)
      else:
        weights = F.softmax(self.alphas_normal, dim=-1)
      s0, s1 = s1, cell(s0, s1, weights)
    out = self.global_pooling(s1)
    logits = self.classifier(out.view(out.size(0),-1))
    return logits

  def _loss(self, input, target):
    logits = self(input)
    return self._criterion(logits, target)

  def _initialize_alphas(self):
    k = sum(1 for i in range(self._steps) for n in range(2+i))
    num_ops = len(PRIMITIVES)

    self.alphas_normal = Variable(1e-3*torch.randn(k, num_ops), requires_grad=True)
    self.alphas_reduce = Variable(1e-3*torch.randn(k, num_ops), requires_grad=True)
    self._arch_parameters = [
      self.alphas_normal,
      self.alphas_reduce,
    ]

  def arch_parameters(self):
    return self._arch_parameters


def _concat(xs):
  return torch.cat([x.view(-1) for x in xs])


class Architect(object):

  def __init__(self, model, args):
    self.network_momentum = args.momentum
    self.network_weight_decay = args.weight_decay
    self.model = model
    self.optimizer = torch.optim.Adam(self.model.arch_parameters(),
        lr=args.arch_learning_rate, betas=(0.5, 0.999), weight_decay=args.arch_weight_decay)

  def _compute_unrolled_model(self, input, target, eta, network_optimizer):
    loss = self.model._loss(input, target)
    theta = _concat(self.model.parameters()).data
    try:
      moment = _concat(network_optimizer.state[v]['momentum_buffer'] for v in self.model.parameters()).mul_(self.network_momentum)
    except:
      moment = torch.zeros_like(theta)
    dtheta = _concat(torch.autograd.grad(loss, self.model.parameters())).data + self.network_weight_decay*theta
    unrolled_model = self._construct_model_from_theta(theta.sub(moment+dtheta, alpha=eta))
    return unrolled_model

  def step(self, input_train, target_train, input_valid, target_valid, eta, network_optimizer, unrolled):
    self.optimizer.zero_grad()
    if unrolled:
        self._backward_step_unrolled(input_train, target_train, input_valid, target_valid, eta, network_optimizer)
    else:
        self._backward_step(input_valid, target_valid)
    self.optimizer.step()

  def _backward_step(self, input_valid, target_valid):
    loss = self.model._loss(input_valid, target_valid)
    loss.backward()

  def _backward_step_unrolled(self, input_train, target_train, input_valid, target_valid, eta, network_optimizer):
    unrolled_model = self._compute_unrolled_model(input_train, target_train, eta, network_optimizer)
    unrolled_loss = unrolled_model._loss(input_valid, target_valid)

    unrolled_loss.backward()
    dalpha = [v.grad for v in unrolled_model.arch_parameters()]
    vector = [v.grad.data for v in unrolled_model.parameters()]
    implicit_grads = self._hessian_vector_product(vector, input_train, target_train)

    for g, ig in zip(dalpha, implicit_grads):
      g.data.sub_(ig.data, alpha=eta)

    for v, g in zip(self.model.arch_parameters(), dalpha):
      if v.grad is None:
        v.grad = Variable(g.data)
      else:
        v.grad.data.copy_(g.data)

  def _construct_model_from_theta(self, theta):
    model_new = self.model.new()
    model_dict = self.model.state_dict()

    params, offset = {}, 0
    for k, v in self.model.named_parameters():
      v_length = np.prod(v.size())
      params[k] = theta[offset: offset+v_length].view(v.size())
      offset += v_length

    assert offset == len(theta)
    model_dict.update(params)
    model_new.load_state_dict(model_dict)
    return model_new

  def _hessian_vector_product(self, vector, input, target, r=1e-2):
    R = r / _concat(vector).norm()
    for p, v in zip(self.model.parameters(), vector):
      p.data.add_(v, alpha=R)
    loss = self.model._loss(input, target)
    grads_p = torch.autograd.grad(loss, self.model.arch_parameters())

    for p, v in zip(self.model.parameters(), vector):
      p.data.sub_(v, alpha=2*R)
    loss = self.model._loss(input, target)
    grads_n = torch.autograd.grad(loss, self.model.arch_parameters())

    for p, v in zip(self.model.parameters(), vector):
      p.data.add_(v, alpha=R)

    return [(x-y).div_(2*R) for x, y in zip(grads_p, grads_n)]


class args:
  learning_rate = 0.025
  learning_rate_min = 0.001
  momentum = 0.9
  weight_decay = 3e-4
  epochs = 2
  grad_clip = 5
  unrolled = True
  arch_learning_rate = 3e-4 * 100
  arch_weight_decay = 1e-3


def train(train_queue, valid_queue, model, architect, criterion, optimizer, lr):
  for step, (input, target) in enumerate(train_queue):
    model.train()
    n = input.size(0)

    input = Variable(input, requires_grad=False)
    target = Variable(target, requires_grad=False)

    # get a random minibatch from the search queue with replacement
    input_search, target_search = next(iter(valid_queue))
    input_search = Variable(input_search, requires_grad=False)
    target_search = Variable(target_search, requires_grad=False)

    architect.step(input, target, input_search, target_search, lr, optimizer, unrolled=args.unrolled)

    optimizer.zero_grad()
    logits = model(input)
    loss = criterion(logits, target)

    loss.backward()
    nn.utils.clip_grad_norm(model.parameters(), args.grad_clip)
    optimizer.step()
    record.append(loss.item())
    record.append([a.detach().numpy().copy() for a in model.arch_parameters()])


criterion = nn.CrossEntropyLoss()
model = Network(4, 3, 2, criterion)
initialize(model)
optimizer = torch.optim.SGD(
    model.parameters(),
    args.learning_rate,
    momentum=args.momentum,
    weight_decay=args.weight_decay)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
      optimizer, float(args.epochs), eta_min=args.learning_rate_min)

architect = Architect(model, args)
train_queue = [(torch.tensor(x), torch.tensor(y)) for x, y in train_rows]
valid_queue = [(torch.tensor(x), torch.tensor(y)) for x, y in valid_rows]
for epoch in range(args.epochs):
  lr = scheduler.get_last_lr()[0]
  record.append(F.softmax(model.alphas_normal, dim=-1).detach().numpy())
  train(train_queue, valid_queue, model, architect, criterion, optimizer, lr)
  scheduler.step()
  valid_queue = valid_queue[1:] + valid_queue[:1]
  record.append(params_of(model))
"""

DARTS_STEPS = [
    (
        "import torch\nimport numpy as np\nimport torch.nn as nn\nimport torch.nn.functional as F",
        "import retrograd as torch\nimport numpy as np\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F",
    ),
    (
        "        self._backward_step_unrolled(input_train",
        "        grads = self._backward_step_unrolled(input_train",
    ),
    (
        "        self._backward_step(input_valid, target_valid)\n    self.optimizer.step()",
        "        grads = self._backward_step(input_valid, target_valid)\n    self.optimizer.step(grads)",
    ),
    (
        "    loss = self.model._loss(input_valid, target_valid)\n    loss.backward()",
        "    loss = self.model._loss(input_valid, target_valid)\n    return loss.backward()",
    ),
    (
        "    unrolled_loss.backward()\n    dalpha = [v.grad for v",
        "    grads = unrolled_loss.backward()\n    dalpha = [v.grad(grads) for v",
    ),
    ("    vector = [v.grad.data for v", "    vector = [v.grad(grads).data for v"),
    (
        "      if v.grad is None:\n        v.grad = Variable(g.data)\n      else:\n        v.grad.data.copy_(g.data)\n",
        "      if v.grad(grads) is None:\n        v.grad_replace(grads, Variable(g.data))\n      else:\n        v.grad(grads).data.copy_(g.data)\n    return grads\n",
    ),
    (
        "    loss.backward()\n    nn.utils.clip_grad_norm(model.parameters(), args.grad_clip)\n    optimizer.step()",
        "    grads = loss.backward()\n    nn.utils.clip_grad_norm(grads, model.parameters(), args.grad_clip)\n    optimizer.step(grads)",
    ),
]


def test_darts_second_order_architecture_search_as_torch(capsys):
    rng = np.random.default_rng(25301)

    def rows(n):
        return [
            (rng.standard_normal((4, 1, 6, 6)).astype(np.float32), rng.integers(0, 3, 4))
            for _ in range(n)
        ]

    train_rows, valid_rows = rows(2), rows(2)
    (theirs, ours), _ = runs_with_draws(
        DARTS_SOURCE, DARTS_STEPS, capsys, 25301, train_rows=train_rows,
        valid_rows=valid_rows, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=5e-4, atol=5e-6)
    # the architecture weights moved from their 1e-3 draws
    assert np.abs(theirs[-2][0] - theirs[2][0]).max() > 1e-3
