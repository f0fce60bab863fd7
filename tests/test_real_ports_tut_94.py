"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of pytorch/tutorials' custom-function, parametrization and recipe tutorials, run on small
fake data against torch's run of the same program from the same weights and draws.

- A convolution fused with per-channel standardization as one custom ``Function``, in the
  style of the conv/batch-norm fusion tutorial: ``@once_differentiable``, the convolution's
  backward by ``F.conv2d`` of transposed batches and ``conv_transpose2d``, the standardization
  by hand (``var(unbiased=True, dim=(0, 2, 3))``, ``t[None, :, None, None]``, in-place
  ``out /=`` and ``grad +=``/``-=``), each ``gradcheck``ed, a fused backward returning more
  gradients than inputs (the surplus ``None``s), a module of ``torch.empty(*shape,
  **factory_kwargs)`` with ``kaiming_uniform_``, and a small classifier, fused and unfused
  (``BatchNorm2d(affine=False, track_running_stats=False)``, ``F.relu_``), trained by
  ``Adadelta`` and ``StepLR`` and evaluated under ``torch.inference_mode()``;
- custom functions differentiated twice, in the style of the double-backward tutorial: saving
  an input, saving an output, returning an intermediate as an extra output, a ``forward``
  without ``ctx`` plus ``setup_context``, and a backward that is itself a custom function,
  each through ``gradcheck`` and ``gradgradcheck``, with their second derivatives compared;
- parametrizations, in the style of the parametrizations tutorial: symmetric and skew
  constraints registered on ``nn.Linear`` and ``nn.Conv2d``, ``layer.parametrizations.weight``
  (``[0]``, ``.original``), ``parametrize.cached()``, chains ending in a Cayley map
  (``torch.linalg.solve`` with an identity buffer) or ``torch.matrix_exp`` (``eigvalsh``),
  ``right_inverse`` through ``layer.weight = X``, ``remove_parametrizations`` (both values of
  ``leave_parametrized``) and a parametrized layer trained by Adam;
- the saving and loading recipes around a small CIFAR-style net:
  ``net.state_dict()[name].size()``, ``optimizer.state_dict()``, ``torch.save`` of a state and
  of a checkpoint dict, ``torch.load(path, weights_only=True)`` and ``map_location``, resumed
  training, two models in one file, warm-starting with ``load_state_dict(..., strict=False)``;
- shapes reasoned about on the ``"meta"`` device: tensors and modules made there, ``with
  torch.device("meta"):``, forward hooks printing ``output.shape``, then
  ``to_empty(device="cpu")`` and ``reset_parameters``.

The regressions guarded: a custom function's ``backward`` returning more gradients than
inputs, the surplus all ``None``, was refused (torch drops them); ``state_dict()`` values
answered ``size()`` with NumPy's int (``'int' object is not callable``); ``torch.device(...)``
was not a context manager. Found and not fixed: a ``"meta"`` tensor holds its values
(retrograd's meta device is a label on a backend that stores data), so a meta tensor of a
size no memory holds is refused as out of memory.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

_TORCH_AND_NN = (
    "\nimport torch\nimport torch.nn as nn\n",
    "\nimport retrograd as torch\nimport retrograd.nn as nn\n",
)


def _step_lines(optimizer: str, indent: int) -> tuple[str, str]:
    """The port of a program's ``loss.backward()`` then ``<optimizer>.step()`` at ``indent``
    spaces: the gradients returned and handed to the step."""
    pad = " " * indent
    return (
        f"{pad}loss.backward()\n{pad}{optimizer}.step()\n",
        f"{pad}grads = loss.backward()\n{pad}{optimizer}.step(grads)\n",
    )


# -- a convolution fused with per-channel standardization -----------------------------------------
FUSED_SOURCE = """
import math
import torch
import torch.nn as nn
from torch.autograd.function import once_differentiable as once_only
from torch.nn import functional as F

def per_channel(v):
    # a (C,) statistic broadcast against an (N, C, H, W) batch
    return v[None, :, None, None]

def conv_grads(g, x, w):
    # the input's gradient is a transposed convolution; the kernel's is a convolution of the
    # batch with the output gradient, both with batch and channels swapped
    grad_w = F.conv2d(x.transpose(0, 1), g.transpose(0, 1)).transpose(0, 1)
    return torch.nn.functional.conv_transpose2d(g, w), grad_w

class Conv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return F.conv2d(x, w)

    @staticmethod
    @once_only
    def backward(ctx, g):
        return conv_grads(g, *ctx.saved_tensors)

def standardize(ctx, y, eps):
    # y minus its channel mean, over its channel's unbiased std plus eps
    ctx.mean = y.mean(dim=(0, 2, 3))
    ctx.std = torch.sqrt(y.var(unbiased=True, dim=(0, 2, 3)))
    ctx.eps = eps
    out = y - per_channel(ctx.mean)
    out /= per_channel(ctx.std + eps)
    return out

def standardize_grad(ctx, g, y):
    n = y.numel() / y.size(1)
    d = ctx.std + ctx.eps
    centred = y - per_channel(ctx.mean)
    through_std = (g * centred).sum(dim=(0, 2, 3)) / (d * d * (n - 1) * ctx.std)
    grad = centred * per_channel(-through_std)
    grad += g / per_channel(d)
    grad -= per_channel(g.sum(dim=(0, 2, 3)) / (n * d))
    return grad

class Standardize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, eps=1e-3):
        ctx.save_for_backward(y)
        return standardize(ctx, y, eps)

    @staticmethod
    @once_only
    def backward(ctx, g):
        y, = ctx.saved_tensors
        return standardize_grad(ctx, g, y)

kernel = torch.rand(2, 2, 2, 2, dtype=torch.double, requires_grad=True)
batch = torch.rand(2, 2, 3, 4, dtype=torch.double, requires_grad=True)
record.append(torch.autograd.gradcheck(Conv.apply, (batch, kernel)))
lumpy = torch.rand(3, 2, 2, 3, dtype=torch.double, requires_grad=True)
record.append(torch.autograd.gradcheck(Standardize.apply, (lumpy,), fast_mode=False))

class ConvStandardize(torch.autograd.Function):
    # only the input and kernel are kept: the conv output is recomputed in backward
    @staticmethod
    def forward(ctx, x, w, eps=1e-3):
        ctx.save_for_backward(x, w)
        return standardize(ctx, F.conv2d(x, w), eps)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        g = standardize_grad(ctx, g, F.conv2d(x, w))
        grad_x, grad_w = conv_grads(g, x, w)
        return grad_x, grad_w, None, None, None  # more than the three inputs: torch drops them

record.append(torch.autograd.gradcheck(ConvStandardize.apply, (batch, kernel)))

class FusedBlock(nn.Module):
    def __init__(self, c_in, c_out, k, eps=1e-3, device=None, dtype=None):
        super().__init__()
        factory_kwargs = {"device": device, "dtype": dtype}
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(*(c_out, c_in, k, k), **factory_kwargs))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    def forward(self, x):
        return ConvStandardize.apply(x, self.weight, self.eps)

def plain_block(c_in, c_out):
    # the unfused reference: library conv and batch statistics without running averages
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, bias=False),
        nn.BatchNorm2d(c_out, affine=False, track_running_stats=False),
    )

class Classifier(nn.Module):
    def __init__(self, fused):
        super().__init__()
        self.fused = fused
        if fused:
            self.block1, self.block2 = FusedBlock(1, 3, 3), FusedBlock(3, 4, 3)
        else:
            self.block1, self.block2 = plain_block(1, 3), plain_block(3, 4)
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        x = F.relu_(self.block1(x))
        x = F.max_pool2d(F.relu_(self.block2(x)), 2)
        peak_memory.append(torch.cuda.memory_allocated())
        return F.log_softmax(self.out(x.flatten(1)), dim=1)

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
train_set = torch.utils.data.TensorDataset(torch.tensor(images[:8]), torch.tensor(labels[:8]))
test_set = torch.utils.data.TensorDataset(torch.tensor(images[8:]), torch.tensor(labels[8:]))
train_loader = torch.utils.data.DataLoader(train_set, batch_size=4)
test_loader = torch.utils.data.DataLoader(test_set, batch_size=2)

def evaluate(model):
    model.eval()
    total, hits = 0.0, 0
    with torch.inference_mode():
        for x, y in test_loader:
            logp = model(x.to(device))
            total += F.nll_loss(logp, y.to(device), reduction="sum").item()
            guess = logp.argmax(dim=1, keepdim=True)
            hits += guess.eq(y.view_as(guess)).sum().item()
    print(f"Test set: loss {total / len(test_loader.dataset):.4f}, {hits} right")
    record.append(total / len(test_loader.dataset))

import torch.optim as optim
from torch.optim import lr_scheduler

for fused in (True, False):
    peak_memory = []
    clf = Classifier(fused).to(device)
    initialize(clf)
    opt = optim.Adadelta(clf.parameters(), lr=1.0)
    schedule = lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    for epoch in range(2):
        clf.train()
        for x, y in train_loader:
            opt.zero_grad()
            loss = F.nll_loss(clf(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            record.append(loss.item())
        evaluate(clf)
        schedule.step()
    record.append(params_of(clf))
"""

FUSED_STEPS = [
    _TORCH_AND_NN,
    ("import torch.optim as optim\n", "import retrograd.optim as optim\n"),
    _step_lines("opt", 12),
]  # fmt: skip


def test_fused_conv_standardize_custom_function_trains_as_torch(capsys):
    rng = np.random.default_rng(9401)
    images = rng.uniform(0, 1, (12, 1, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 4, 12)
    (theirs, ours), logs = runs_with_draws(
        FUSED_SOURCE, FUSED_STEPS, capsys, 9401, initialize=initializer(), params_of=params_of,
        images=images, labels=labels,
    )  # fmt: skip
    assert theirs[:3] == [True, True, True] and len(theirs) == 17
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
    assert logs[1].count("Test set") == logs[0].count("Test set") == 4


@pytest.mark.parametrize("lib", [torch, rg], ids=["torch", "retrograd"])
def test_custom_function_backward_may_return_surplus_nones_as_torch(lib):
    class Scale(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, factor):
            ctx.factor = factor
            return x * factor

        @staticmethod
        def backward(ctx, grad_out):
            return grad_out * ctx.factor, None, None, None

    class TooMany(Scale):
        @staticmethod
        def backward(ctx, grad_out):
            return grad_out, None, grad_out

    x = lib.tensor([1.0, 2.0], requires_grad=True)
    (grad,) = lib.autograd.grad(Scale.apply(x, 3.0).sum(), x)
    assert grad.tolist() == [3.0, 3.0]
    # a surplus gradient that is not None stays an error, naming the counts
    with pytest.raises(RuntimeError, match=r"incorrect number of gradients \(expected 2, got 3\)"):
        lib.autograd.grad(TooMany.apply(x, 3.0).sum(), x)


# -- custom functions differentiated twice ---------------------------------------------------------
DOUBLE_BACKWARD_SOURCE = """
import torch

class Quartic(torch.autograd.Function):
    # keeps its input; backward is written in differentiable ops, so it differentiates again
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 4

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 4 * g * x ** 3

class Logistic(torch.autograd.Function):
    # keeps its output, not its input
    @staticmethod
    def forward(ctx, x):
        y = torch.sigmoid(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        y, = ctx.saved_tensors
        return g * y * (1 - y)

class Softplus(torch.autograd.Function):
    # exp(x) is an intermediate the backward needs: returned as a second output, so that a
    # second backward reaches it through the graph
    @staticmethod
    def forward(ctx, x):
        e = torch.exp(x)
        ctx.save_for_backward(e)
        return torch.log1p(e), e

    @staticmethod
    def backward(ctx, g, g_e):
        e, = ctx.saved_tensors
        grad = g * e / (1 + e)
        grad += g_e * e
        return grad

def softplus(x):
    return Softplus.apply(x)[0]

class SquareAndSlope(torch.autograd.Function):
    # forward without ctx; what backward needs is saved by setup_context
    @staticmethod
    def forward(x):
        return x * x, 2 * x

    @staticmethod
    def setup_context(ctx, inputs, outputs):
        x, = inputs
        ctx.save_for_backward(x, outputs[1])

    @staticmethod
    def backward(ctx, g, g_slope):
        x, slope = ctx.saved_tensors
        return g * slope + 2 * g_slope

def square(x):
    return SquareAndSlope.apply(x)[0]

class Sine(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return SineGrad.apply(g, x)

class SineGrad(torch.autograd.Function):
    # g * cos(x) as a custom function of its own, with its own backward
    @staticmethod
    def forward(ctx, g, x):
        ctx.save_for_backward(g, x)
        return g * torch.cos(x)

    @staticmethod
    def backward(ctx, h):
        g, x = ctx.saved_tensors
        return h * torch.cos(x), -h * g * torch.sin(x)

checks = []
for fn in (Quartic.apply, Logistic.apply, softplus, square, Sine.apply):
    point = torch.randn(2, 3, dtype=torch.double, requires_grad=True)
    checks.append(torch.autograd.gradcheck(fn, point))
    checks.append(torch.autograd.gradgradcheck(fn, point))
scalar = torch.tensor(0.7, dtype=torch.double, requires_grad=True).clone()
checks.append(torch.autograd.gradgradcheck(Logistic.apply, scalar))
record.append(checks)

x = torch.randn(2, 3, dtype=torch.double, requires_grad=True)
for fn in (Quartic.apply, Logistic.apply, softplus, square, Sine.apply):
    slope, = torch.autograd.grad(fn(x).sum(), x, create_graph=True)
    curvature, = torch.autograd.grad((slope * slope).sum(), x)
    record.append(slope.detach().numpy().copy())
    record.append(curvature.numpy().copy())
"""


def test_double_backward_with_custom_functions_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        DOUBLE_BACKWARD_SOURCE,
        [("\nimport torch\n", "\nimport retrograd as torch\n")],
        capsys,
        9402,
    )
    assert len(theirs) == 11 and theirs[0] == [True] * 11
    assert_records_agree(ours, theirs, rtol=1e-10, atol=1e-12)


# -- parametrizations ------------------------------------------------------------------------------
PARAMETRIZATIONS_SOURCE = """
import torch
import torch.nn as nn
from torch.nn.utils import parametrize

def mirror_upper(M):
    # the upper triangle reflected below the diagonal
    return M.triu() + M.triu(1).transpose(-1, -2)

S = mirror_upper(torch.rand(4, 4))
assert torch.allclose(S, S.T)

class SymLinear(nn.Module):
    # the constraint written into forward by hand
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(n, n))

    def forward(self, x):
        return x @ mirror_upper(self.weight)

record.append(SymLinear(4)(torch.rand(5, 4)).detach().numpy().copy())

class Symmetric(nn.Module):
    def forward(self, M):
        return mirror_upper(M)

class Skew(nn.Module):
    def forward(self, M):
        upper = M.triu(1)
        return upper - upper.transpose(-1, -2)

    def right_inverse(self, K):
        return K.triu(1)  # what forward reads of a skew matrix

fc = nn.Linear(4, 4)
initialize(fc)
print("plain:", fc)
parametrize.register_parametrization(fc, "weight", Symmetric())
print("constrained:", fc)
print(fc.parametrizations, fc.parametrizations.weight, fc.parametrizations.weight[0])
record.append(fc.weight.detach().numpy().copy())
record.append(list(dict(fc.named_parameters())))
raw = fc.parametrizations.weight.original
record.append(torch.dist(fc.weight, mirror_upper(raw)).item())

conv = nn.Conv2d(in_channels=2, out_channels=3, kernel_size=3)
initialize(conv)
parametrize.register_parametrization(conv, "weight", Skew())  # each 3x3 kernel skew
print(conv.weight[1, 0])
record.append(conv.weight.detach().numpy().copy())

class Announced(nn.Module):
    def forward(self, M):
        print("computing the parametrization")
        return M

loud = nn.Linear(3, 3)
parametrize.register_parametrization(loud, "weight", Announced())
twice = loud.weight @ loud.weight
with parametrize.cached():
    once = loud.weight @ loud.weight + loud.weight.sum()

class Cayley(nn.Module):
    # a skew K maps to the orthogonal (I - K)^-1 (I + K)
    def __init__(self, n):
        super().__init__()
        self.register_buffer("eye", torch.eye(n))

    def forward(self, K):
        return torch.linalg.solve(self.eye - K, self.eye + K)

    def right_inverse(self, Q):
        return torch.linalg.solve(Q + self.eye, Q - self.eye)

class Expm(nn.Module):
    def forward(self, M):
        return torch.matrix_exp(M)

rotation = nn.Linear(4, 4)
initialize(rotation)
parametrize.register_parametrization(rotation, "weight", Skew())
parametrize.register_parametrization(rotation, "weight", Cayley(4))
Q = rotation.weight
print(torch.dist(Q.T @ Q, torch.eye(4)))
record.append(Q.detach().numpy().copy())

spd = nn.Linear(4, 4)
initialize(spd)
parametrize.register_parametrization(spd, "weight", Symmetric())
parametrize.register_parametrization(spd, "weight", Expm())
record.append(torch.linalg.eigvalsh(spd.weight).detach().numpy().copy())

# assigning the weight goes through the right inverses, last to first
target = torch.tensor(orthogonal)
if target.det() < 0.0:
    target[0].neg_()
rotation.weight = target
record.append(rotation.parametrizations.weight.original.detach().numpy().copy())
record.append(torch.dist(rotation.weight, target).item())
skewed = nn.Linear(4, 4)
parametrize.register_parametrization(skewed, "weight", Skew())
K = torch.rand(4, 4)
skewed.weight = K - K.T
record.append(skewed.parametrizations.weight.original.detach().numpy().copy())

for keep in (True, False):
    freed = nn.Linear(4, 4)
    initialize(freed)
    parametrize.register_parametrization(freed, "weight", Skew())
    parametrize.remove_parametrizations(freed, "weight", leave_parametrized=keep)
    print(freed, freed.weight)
    record.append(params_of(freed))

# an orthogonal first layer, trained
net = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
initialize(net)
parametrize.register_parametrization(net[0], "weight", Skew())
parametrize.register_parametrization(net[0], "weight", Cayley(4))
adam = torch.optim.Adam(net.parameters(), lr=0.05)
xs, ys = torch.rand(6, 4), torch.rand(6, 2)
for _ in range(3):
    adam.zero_grad()
    loss = nn.functional.mse_loss(net(xs), ys)
    loss.backward()
    adam.step()
    record.append(loss.item())
record.append(params_of(net))
record.append(net[0].weight.detach().numpy().copy())
"""

PARAMETRIZATIONS_STEPS = [
    _TORCH_AND_NN,
    _step_lines("adam", 4),
]  # fmt: skip


def test_parametrizations_as_torch(capsys):
    orthogonal = np.linalg.qr(np.random.default_rng(9403).standard_normal((4, 4)))[0]
    (theirs, ours), logs = runs_with_draws(
        PARAMETRIZATIONS_SOURCE, PARAMETRIZATIONS_STEPS, capsys, 9403, initialize=initializer(),
        params_of=params_of, orthogonal=orthogonal.astype(np.float32),
    )  # fmt: skip
    assert len(theirs) == 17
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
    # computed at registration and at each read, but once inside ``cached()``
    assert logs[0].count("computing the parametrization") == 4
    assert logs[1].count("computing the parametrization") == 4


# -- saving and loading: states, checkpoints, two models in a file, warm starts --------------------
RECIPES_SOURCE = """
import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn import functional as F

class SmallCifarNet(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3)   # 12 -> 10, pooled to 5
        self.conv2 = nn.Conv2d(4, 6, 2)   # 5 -> 4, pooled to 2
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.fc1 = nn.Linear(6 * 2 * 2, 12)
        self.fc2 = nn.Linear(12, classes)

    def forward(self, x):
        h = self.pool(F.relu(self.conv1(x)))
        h = self.pool(F.relu(self.conv2(h)))
        return self.fc2(F.relu(self.fc1(h.view(-1, 6 * 2 * 2))))

net = SmallCifarNet()
initialize(net)
sgd = optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

print("state of the model:")
for key in net.state_dict():
    print(key, net.state_dict()[key].size())
    record.append(list(net.state_dict()[key].size()))
print("state of the optimizer:")
for key, value in sgd.state_dict().items():
    print(key, value)
record.append(sgd.state_dict()["param_groups"][0]["params"])

loss_fn = nn.CrossEntropyLoss()
for epoch in range(2):
    seen = 0.0
    for inputs, targets in batches:
        sgd.zero_grad()  # gradients would pile up across batches otherwise
        loss = loss_fn(net(inputs), targets)
        loss.backward()
        sgd.step()
        seen += loss.item()
    record.append(seen)

weights_file = folder + "/weights.pt"
torch.save(net.state_dict(), weights_file)
copy = SmallCifarNet()
copy.load_state_dict(torch.load(weights_file, weights_only=True))
copy.eval()
record.append(params_of(copy))

# a general checkpoint: model, optimizer (its momentum buffers) and bookkeeping together
state = {"model": net.state_dict(), "optimizer": sgd.state_dict()}
torch.save({"epoch": 2, "loss": 0.25, **state}, folder + "/ckpt.pt")
resumed = SmallCifarNet()
resumed_opt = optim.SGD(resumed.parameters(), lr=0.01, momentum=0.9)
ckpt = torch.load(folder + "/ckpt.pt", weights_only=True)
resumed.load_state_dict(ckpt["model"])
resumed_opt.load_state_dict(ckpt["optimizer"])
record.append([ckpt["epoch"], ckpt["loss"]])
resumed.train()
for inputs, targets in batches:
    resumed_opt.zero_grad()
    loss = loss_fn(resumed(inputs), targets)
    loss.backward()
    resumed_opt.step()
record.append(params_of(resumed))

# two models and their optimizers in one file
left, right = SmallCifarNet(), SmallCifarNet()
initialize(left)
initialize(right)
pair = {
    "left": left.state_dict(), "right": right.state_dict(),
    "left_opt": optim.SGD(left.parameters(), lr=0.1).state_dict(),
    "right_opt": optim.Adam(right.parameters()).state_dict(),
}
torch.save(pair, folder + "/pair.pt")
both = torch.load(folder + "/pair.pt", weights_only=True)
left2, right2 = SmallCifarNet(), SmallCifarNet()
left2.load_state_dict(both["left"])
right2.load_state_dict(both["right"])
adam2 = optim.Adam(right2.parameters())
adam2.load_state_dict(both["right_opt"])
left2.eval()
right2.eval()
record.append(params_of(left2, right2))

# warm start: a net with a different head takes what fits of another's state
class TwoWay(SmallCifarNet):
    def __init__(self):
        super().__init__(classes=3)
        self.decide = nn.Linear(3, 2)

    def forward(self, x):
        return self.decide(super().forward(x))

student = TwoWay()
initialize(student)
donor = torch.load(weights_file, weights_only=True)
donor.pop("fc2.weight")
donor.pop("fc2.bias")  # shaped for five classes: it would not load
outcome = student.load_state_dict(donor, strict=False)
print(outcome)
record.append(sorted(outcome.missing_keys))
record.append(sorted(outcome.unexpected_keys))
opt = optim.SGD(student.parameters(), lr=0.05, momentum=0.9)
for inputs, targets in batches:
    opt.zero_grad()
    loss = F.cross_entropy(student(inputs), targets % 2)
    loss.backward()
    opt.step()
record.append(params_of(student))

# loaded onto an explicit device
cpu = torch.device("cpu")
moved = SmallCifarNet()
moved.load_state_dict(torch.load(weights_file, map_location=cpu, weights_only=True))
moved.to(cpu)
record.append(params_of(moved))
"""

RECIPES_STEPS = [
    ("\nimport torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
     "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n"),
    _step_lines("sgd", 8),
    _step_lines("resumed_opt", 4),
    _step_lines("opt", 4),
]  # fmt: skip


def test_saving_loading_and_warm_starting_as_torch(capsys, tmp_path):
    rng = np.random.default_rng(9404)
    drawn = [
        (rng.uniform(-1, 1, (2, 3, 12, 12)).astype(np.float32), rng.integers(0, 5, 2))
        for _ in range(2)
    ]

    def batches(lib):
        return [(lib.tensor(x), lib.tensor(y)) for x, y in drawn]

    def folder(lib):
        made = tmp_path / lib.__name__
        made.mkdir()
        return str(made)

    (theirs, ours), _ = runs_with_draws(
        RECIPES_SOURCE, RECIPES_STEPS, capsys, 9404, initialize=initializer(), params_of=params_of,
        make_batches=batches, make_folder=folder,
    )  # fmt: skip
    assert len(theirs) == 19
    assert theirs[0] == [4, 3, 3, 3]
    assert theirs[-4:-2] == [["decide.bias", "decide.weight", "fc2.bias", "fc2.weight"], []]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("lib", [torch, rg], ids=["torch", "retrograd"])
def test_state_dict_values_answer_size_as_torch(lib):
    value = lib.nn.Conv2d(3, 6, 5).state_dict()["weight"]
    assert tuple(value.size()) == (6, 3, 5, 5)
    assert value.size(1) == 3 and value.size(-1) == 5
    with pytest.raises(IndexError if lib is torch else rg.ShapeError, match="range"):
        value.size(4)
    if lib is rg:  # still NumPy's element count where NumPy code reads it
        assert value.size == 450 and np.size(value) == 450


# -- shapes on the meta device ---------------------------------------------------------------------
SHAPES_SOURCE = """
import torch
import torch.nn as nn

ghost = torch.rand(3, 2, 9, 9, device="meta")
probe = nn.Conv2d(2, 4, 3, stride=2, device="meta")
shape_only = probe(ghost)
print(shape_only.shape)
record.append([list(shape_only.shape), shape_only.device.type, shape_only.is_meta])

def report(layer, args, result):
    print(f"{type(layer).__name__} -> {tuple(result.shape)}")
    record.append([type(layer).__name__, list(result.shape)])

with torch.device("meta"):
    tower = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(4 * 5 * 5, 6), nn.ReLU(), nn.Linear(6, 2),
    )
    sample = torch.randn((2, 3, 12, 12))
record.append([p.device.type for p in tower.parameters()] + [sample.device.type])

for _, sub in tower.named_modules():
    sub.register_forward_hook(report)
tower(sample)

# materialized on the CPU, re-initialized, then given torch's weights
tower.to_empty(device="cpu")
for sub in tower.modules():
    if hasattr(sub, "reset_parameters"):
        sub.reset_parameters()
initialize(tower)
record.append([p.device.type for p in tower.parameters()] + [torch.empty(1).device.type])
record.append(tower(torch.ones(1, 3, 12, 12)).detach().numpy().copy())
"""


def test_shapes_on_the_meta_device_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        SHAPES_SOURCE,
        [
            _TORCH_AND_NN,
        ],
        capsys, 9405, initialize=initializer(),
    )  # fmt: skip
    assert len(theirs) == 20 and theirs[1] == ["meta"] * 7 and theirs[10] == ["cpu"] * 7
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


def test_a_device_is_a_context_manager_for_the_default_device():
    with rg.device("meta"):
        made = rg.zeros(2)
        with rg.device("cpu"):
            inner = rg.nn.Linear(2, 2)
        after_inner = rg.ones(1)
    assert made.device.type == "meta" and after_inner.device.type == "meta"
    assert inner.weight.device.type == "cpu" and rg.empty(1).device.type == "cpu"
    if rg.get_default_device().type == "cpu":  # a CPU backend makes no tensor on a GPU
        with pytest.raises(rg.DTypeError, match="cuda"), rg.device("cuda"):
            pass
        assert rg.zeros(1).device.type == "cpu"
