# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
pytorch/tutorials' custom-function, parametrization and recipe programs, run on small fake
data against torch's run of the same code from the same weights and draws.

- "Fusing Convolution and Batch Norm using Custom Function" (``intermediate_source/
  custom_function_conv_bn_tutorial.py``): ``Conv2D`` with ``@once_differentiable`` and
  ``convolution_backward`` (``F.conv2d`` of transposed batches, ``conv_transpose2d``),
  ``BatchNorm`` by hand (``X.var(unbiased=True, dim=(0, 2, 3))``, ``t[None, :, None, None]``,
  ``out /= ...``, the in-place ``grad_input`` algebra of ``batch_norm_backward``), both
  ``gradcheck``ed, then ``FusedConvBN2DFunction`` whose backward returns seven gradients for
  three inputs (the surplus ``None``s), in ``FusedConvBN`` with ``torch.empty(*weight_shape,
  **factory_kwargs)`` and ``kaiming_uniform_``, and the tutorial's MNIST ``Net`` (fused and
  unfused: ``BatchNorm2d(affine=False, track_running_stats=False)``, ``F.relu_``) trained by
  ``Adadelta`` and ``StepLR`` and tested under ``torch.inference_mode()``;
- "Double Backward with Custom Functions" (``intermediate_source/
  custom_function_double_backward_tutorial.rst``): ``Square``, ``Exp`` (saving the output),
  ``Sinh`` returning its intermediates as outputs, ``MyCube`` with ``setup_context`` and a
  ``forward`` without ``ctx``, ``Cube``/``CubeBackward`` (a backward that is itself a custom
  function), each through ``gradcheck`` and ``gradgradcheck``, and their second derivatives;
- the parametrizations tutorial (``intermediate_source/parametrizations.py``): ``Symmetric``,
  ``Skew``, ``register_parametrization`` on ``nn.Linear`` and ``nn.Conv2d``,
  ``layer.parametrizations.weight.original``, ``parametrize.cached()``, chained ``Skew`` and
  ``CayleyMap`` (``torch.linalg.solve`` with an ``Id`` buffer) or ``MatrixExponential``,
  ``right_inverse`` through ``layer.weight = X``, ``remove_parametrizations`` (with
  ``leave_parametrized=False``), and (beyond the tutorial) a parametrized layer trained;
- the recipes "Saving and loading models for inference", "... a general checkpoint", "...
  multiple models in one file", "Warmstarting model using parameters from a different model"
  (``load_state_dict(..., strict=False)``) and "Zeroing out gradients", around the CIFAR ``Net``:
  ``net.state_dict()[param_tensor].size()``, ``optimizer.state_dict()``, ``torch.save`` of the
  whole model and of a dict, ``torch.load(PATH, weights_only=True)``, ``map_location``;
- "Reasoning about Shapes in PyTorch" (``recipes_source/recipes/reasoning_about_shapes.py``)
  at small sizes: tensors and modules on the ``"meta"`` device, ``with torch.device("meta"):``
  building the net and its input, forward hooks printing ``output.shape``, then
  ``to_empty(device="cpu")`` and ``reset_parameters``.

The defects found: a custom function's ``backward`` returning more gradients than inputs, the
surplus all ``None``, was refused (torch drops them); ``state_dict()`` values answered
``size()`` with NumPy's int (``'int' object is not callable``: the recipes print
``net.state_dict()[name].size()``); ``torch.device(...)`` was not a context manager. Found and
not fixed: a ``"meta"`` tensor holds its values (retrograd's meta device is a label on a
backend that stores data), so the recipe's ``torch.rand(2**10, 3, 2**16, 2**16,
device="meta")`` is refused as out of memory.
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


# -- Fusing Convolution and Batch Norm using Custom Function ----------------------------------------
FUSED_SOURCE = """
import torch
from torch.autograd.function import once_differentiable
import torch.nn.functional as F

def convolution_backward(grad_out, X, weight):
    grad_input = F.conv2d(X.transpose(0, 1), grad_out.transpose(0, 1)).transpose(0, 1)
    grad_X = torch.nn.functional.conv_transpose2d(grad_out, weight)
    return grad_X, grad_input

class Conv2D(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, weight):
        ctx.save_for_backward(X, weight)
        return F.conv2d(X, weight)

    # Use @once_differentiable by default unless we intend to double backward
    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        X, weight = ctx.saved_tensors
        return convolution_backward(grad_out, X, weight)

weight = torch.rand(2, 2, 3, 3, requires_grad=True, dtype=torch.double)
X = torch.rand(2, 2, 4, 4, requires_grad=True, dtype=torch.double)
torch.autograd.gradcheck(Conv2D.apply, (X, weight))

def unsqueeze_all(t):
    # Helper function to ``unsqueeze`` all the dimensions that we reduce over
    return t[None, :, None, None]

def batch_norm_backward(grad_out, X, sum, sqrt_var, N, eps):
    # We use the formula: ``out = (X - mean(X)) / (sqrt(var(X)) + eps)``
    # in batch norm 2D forward. To simplify our derivation, we follow the
    # chain rule and compute the gradients as follows before accumulating
    # them all into a final grad_input.
    #  1) ``grad of out wrt var(X)`` * ``grad of var(X) wrt X``
    #  2) ``grad of out wrt mean(X)`` * ``grad of mean(X) wrt X``
    #  3) ``grad of out wrt X in the numerator`` * ``grad of X wrt X``
    # We then rewrite the formulas to use as few extra buffers as possible
    tmp = ((X - unsqueeze_all(sum) / N) * grad_out).sum(dim=(0, 2, 3))
    tmp *= -1
    d_denom = tmp / (sqrt_var + eps)**2  # ``d_denom = -num / denom**2``
    # It is useful to delete tensors when you no longer need them with ``del``
    # For example, we could've done ``del tmp`` here because we won't use it later
    # In this case, it's not a big difference because ``tmp`` only has size of (C,)
    # The important thing is avoid allocating NCHW-sized tensors unnecessarily
    d_var = d_denom / (2 * sqrt_var)  # ``denom = torch.sqrt(var) + eps``
    # Compute ``d_mean_dx`` before allocating the final NCHW-sized grad_input buffer
    d_mean_dx = grad_out / unsqueeze_all(sqrt_var + eps)
    d_mean_dx = unsqueeze_all(-d_mean_dx.sum(dim=(0, 2, 3)) / N)
    # ``d_mean_dx`` has already been reassigned to a C-sized buffer so no need to worry

    # ``(1) unbiased_var(x) = ((X - unsqueeze_all(mean))**2).sum(dim=(0, 2, 3)) / (N - 1)``
    grad_input = X * unsqueeze_all(d_var * N)
    grad_input += unsqueeze_all(-d_var * sum)
    grad_input *= 2 / ((N - 1) * N)
    # (2) mean (see above)
    grad_input += d_mean_dx
    # (3) Add 'grad_out / <factor>' without allocating an extra buffer
    grad_input *= unsqueeze_all(sqrt_var + eps)
    grad_input += grad_out
    grad_input /= unsqueeze_all(sqrt_var + eps)  # ``sqrt_var + eps > 0!``
    return grad_input

class BatchNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, eps=1e-3):
        # Don't save ``keepdim`` values for backward
        sum = X.sum(dim=(0, 2, 3))
        var = X.var(unbiased=True, dim=(0, 2, 3))
        N = X.numel() / X.size(1)
        sqrt_var = torch.sqrt(var)
        ctx.save_for_backward(X)
        ctx.eps = eps
        ctx.sum = sum
        ctx.N = N
        ctx.sqrt_var = sqrt_var
        mean = sum / N
        denom = sqrt_var + eps
        out = X - unsqueeze_all(mean)
        out /= unsqueeze_all(denom)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        X, = ctx.saved_tensors
        return batch_norm_backward(grad_out, X, ctx.sum, ctx.sqrt_var, ctx.N, ctx.eps)

a = torch.rand(1, 2, 3, 4, requires_grad=True, dtype=torch.double)
torch.autograd.gradcheck(BatchNorm.apply, (a,), fast_mode=False)

class FusedConvBN2DFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, conv_weight, eps=1e-3):
        assert X.ndim == 4  # N, C, H, W
        # (1) Only need to save this single buffer for backward!
        ctx.save_for_backward(X, conv_weight)

        # (2) Exact same Conv2D forward from example above
        X = F.conv2d(X, conv_weight)
        # (3) Exact same BatchNorm2D forward from example above
        sum = X.sum(dim=(0, 2, 3))
        var = X.var(unbiased=True, dim=(0, 2, 3))
        N = X.numel() / X.size(1)
        sqrt_var = torch.sqrt(var)
        ctx.eps = eps
        ctx.sum = sum
        ctx.N = N
        ctx.sqrt_var = sqrt_var
        mean = sum / N
        denom = sqrt_var + eps
        # Try to do as many things in-place as possible
        # Instead of `out = (X - a) / b`, doing `out = X - a; out /= b`
        # avoids allocating one extra NCHW-sized buffer here
        out = X - unsqueeze_all(mean)
        out /= unsqueeze_all(denom)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        X, conv_weight, = ctx.saved_tensors
        # (4) Batch norm backward
        # (5) We need to recompute conv
        X_conv_out = F.conv2d(X, conv_weight)
        grad_out = batch_norm_backward(grad_out, X_conv_out, ctx.sum, ctx.sqrt_var,
                                       ctx.N, ctx.eps)
        # (6) Conv2d backward
        grad_X, grad_input = convolution_backward(grad_out, X, conv_weight)
        return grad_X, grad_input, None, None, None, None, None

weight = torch.rand(3, 2, 3, 3, requires_grad=True, dtype=torch.double)
X = torch.rand(2, 2, 4, 4, requires_grad=True, dtype=torch.double)
torch.autograd.gradcheck(FusedConvBN2DFunction.apply, (X, weight))

import torch.nn as nn
import math

class FusedConvBN(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, exp_avg_factor=0.1,
                 eps=1e-3, device=None, dtype=None):
        super(FusedConvBN, self).__init__()
        factory_kwargs = {'device': device, 'dtype': dtype}
        # Conv parameters
        weight_shape = (out_channels, in_channels, kernel_size, kernel_size)
        self.conv_weight = nn.Parameter(torch.empty(*weight_shape, **factory_kwargs))
        # Batch norm parameters
        num_features = out_channels
        self.num_features = num_features
        self.eps = eps
        # Initialize
        self.reset_parameters()

    def forward(self, X):
        return FusedConvBN2DFunction.apply(X, self.conv_weight, self.eps)

    def reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.conv_weight, a=math.sqrt(5))

import torch.optim as optim
from torch.optim.lr_scheduler import StepLR

# Record memory allocated at the end of the forward pass
memory_allocated = [[],[]]

class Net(nn.Module):
    def __init__(self, fused=True):
        super(Net, self).__init__()
        self.fused = fused
        if fused:
            self.convbn1 = FusedConvBN(1, 4, 3)
            self.convbn2 = FusedConvBN(4, 8, 3)
        else:
            self.conv1 = nn.Conv2d(1, 4, 3, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(4, affine=False, track_running_stats=False)
            self.conv2 = nn.Conv2d(4, 8, 3, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(8, affine=False, track_running_stats=False)
        self.fc1 = nn.Linear(72, 16)
        self.dropout = nn.Dropout(0.0)  # (0.5 in the tutorial: each library would draw its own mask)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        if self.fused:
            x = self.convbn1(x)
        else:
            x = self.conv1(x)
            x = self.bn1(x)
        F.relu_(x)
        if self.fused:
            x = self.convbn2(x)
        else:
            x = self.conv2(x)
            x = self.bn2(x)
        F.relu_(x)
        x = F.max_pool2d(x, 2)
        F.relu_(x)
        x = x.flatten(1)
        x = self.fc1(x)
        x = self.dropout(x)
        F.relu_(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        if fused:
            memory_allocated[0].append(torch.cuda.memory_allocated())
        else:
            memory_allocated[1].append(torch.cuda.memory_allocated())
        return output

def train(model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % 2 == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100. * batch_idx / len(train_loader), loss.item()))
        record.append(loss.item())

def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    # Use inference mode instead of no_grad, for free improved test-time performance
    with torch.inference_mode():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            # sum up batch loss
            test_loss += F.nll_loss(output, target, reduction='sum').item()
            # get the index of the max log-probability
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()

    test_loss /= len(test_loader.dataset)

    print('\\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\\n'.format(
        test_loss, correct, len(test_loader.dataset),
        100. * correct / len(test_loader.dataset)))
    record.append(test_loss)

use_cuda = torch.cuda.is_available()
device = torch.device("cuda" if use_cuda else "cpu")
train_kwargs = {'batch_size': 4}
test_kwargs = {'batch_size': 4}

dataset1 = torch.utils.data.TensorDataset(torch.tensor(images[:8]), torch.tensor(labels[:8]))
dataset2 = torch.utils.data.TensorDataset(torch.tensor(images[8:]), torch.tensor(labels[8:]))

train_loader = torch.utils.data.DataLoader(dataset1, **train_kwargs)
test_loader = torch.utils.data.DataLoader(dataset2, **test_kwargs)

for fused in (True, False):
    torch.manual_seed(123456)

    model = Net(fused=fused).to(device)
    initialize(model)
    optimizer = optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)

    for epoch in range(2):
        train(model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)
        scheduler.step()
    record.append(params_of(model))
"""

FUSED_STEPS = [
    ("\nimport torch\n", "\nimport retrograd as torch\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch.optim as optim\n", "import retrograd.optim as optim\n"),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_fused_conv_batch_norm_custom_function_trains_as_torch(capsys):
    rng = np.random.default_rng(9401)
    images = rng.uniform(0, 1, (12, 1, 10, 10)).astype(np.float32)
    labels = rng.integers(0, 10, 12)
    (theirs, ours), logs = runs_with_draws(
        FUSED_SOURCE, FUSED_STEPS, capsys, 9401, initialize=initializer(), params_of=params_of,
        images=images, labels=labels,
    )  # fmt: skip
    assert len(theirs) == 14
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


# -- Double Backward with Custom Functions ----------------------------------------------------------
DOUBLE_BACKWARD_SOURCE = """
import torch

class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        # Because we are saving one of the inputs use `save_for_backward`
        # Save non-tensors and non-inputs/non-outputs directly on ctx
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    def backward(ctx, grad_out):
        # A function support double backward automatically if autograd
        # is able to record the computations performed in backward
        x, = ctx.saved_tensors
        return grad_out * 2 * x

# Use double precision because finite differencing method magnifies errors
x = torch.rand(3, 3, requires_grad=True, dtype=torch.double)
torch.autograd.gradcheck(Square.apply, x)
# Use gradcheck to verify second-order derivatives
torch.autograd.gradgradcheck(Square.apply, x)

class Exp(torch.autograd.Function):
    # Simple case where everything goes well
    @staticmethod
    def forward(ctx, x):
        # This time we save the output
        result = torch.exp(x)
        # Note that we should use `save_for_backward` here when
        # the tensor saved is an ouptut (or an input).
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad_out):
        result, = ctx.saved_tensors
        return result * grad_out

x = torch.tensor(1., requires_grad=True, dtype=torch.double).clone()
# Validate our gradients using gradcheck
torch.autograd.gradcheck(Exp.apply, x)
torch.autograd.gradgradcheck(Exp.apply, x)

class Sinh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        expx = torch.exp(x)
        expnegx = torch.exp(-x)
        ctx.save_for_backward(expx, expnegx)
        # In order to be able to save the intermediate results, a trick is to
        # include them as our outputs, so that the backward graph is constructed
        return (expx - expnegx) / 2, expx, expnegx

    @staticmethod
    def backward(ctx, grad_out, _grad_out_exp, _grad_out_negexp):
        expx, expnegx = ctx.saved_tensors
        grad_input = grad_out * (expx + expnegx) / 2
        # We cannot skip accumulating these even though we won't use the outputs
        # directly. They will be used later in the second backward.
        grad_input += _grad_out_exp * expx
        grad_input -= _grad_out_negexp * expnegx
        return grad_input

def sinh(x):
    # Create a wrapper that only returns the first output
    return Sinh.apply(x)[0]

x = torch.rand(3, 3, requires_grad=True, dtype=torch.double)
torch.autograd.gradcheck(sinh, x)
torch.autograd.gradgradcheck(sinh, x)

class MyCube(torch.autograd.Function):
    @staticmethod
    def forward(x):
        # We wish to save dx for backward. In order to do so, it must
        # be returned as an output.
        dx = 3 * x ** 2
        result = x ** 3
        return result, dx

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, = inputs
        result, dx = output
        ctx.save_for_backward(x, dx)

    @staticmethod
    def backward(ctx, grad_output, grad_dx):
        x, dx = ctx.saved_tensors
        # In order for the autograd.Function to work with higher-order
        # gradients, we must add the gradient contribution of `dx`,
        # which is grad_dx * 6 * x.
        result = grad_output * dx + grad_dx * 6 * x
        return result

# Wrap MyCube in a function so that it is clearer what the output is
def my_cube(x):
    result, dx = MyCube.apply(x)
    return result

x = torch.randn(3, 3, requires_grad=True, dtype=torch.double)
torch.autograd.gradcheck(my_cube, x)
torch.autograd.gradgradcheck(my_cube, x)

def cube_forward(x):
    return x**3

def cube_backward(grad_out, x):
    return grad_out * 3 * x**2

def cube_backward_backward(grad_out, sav_grad_out, x):
    return grad_out * sav_grad_out * 6 * x

def cube_backward_backward_grad_out(grad_out, x):
    return grad_out * 3 * x**2

class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return cube_forward(x)

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return CubeBackward.apply(grad_out, x)

class CubeBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, grad_out, x):
        ctx.save_for_backward(x, grad_out)
        return cube_backward(grad_out, x)

    @staticmethod
    def backward(ctx, grad_out):
        x, sav_grad_out = ctx.saved_tensors
        dx = cube_backward_backward(grad_out, sav_grad_out, x)
        dgrad_out = cube_backward_backward_grad_out(grad_out, x)
        return dgrad_out, dx

x = torch.tensor(2., requires_grad=True, dtype=torch.double)

torch.autograd.gradcheck(Cube.apply, x)
torch.autograd.gradgradcheck(Cube.apply, x)

x = torch.randn(3, 3, requires_grad=True, dtype=torch.double)
for f in (Square.apply, Exp.apply, sinh, my_cube, Cube.apply):
    g, = torch.autograd.grad(f(x).sum(), x, create_graph=True)
    gg, = torch.autograd.grad((g * g).sum(), x)
    record.append(g.detach().numpy().copy())
    record.append(gg.numpy().copy())
"""


def test_double_backward_with_custom_functions_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        DOUBLE_BACKWARD_SOURCE,
        [("\nimport torch\n", "\nimport retrograd as torch\n")],
        capsys,
        9402,
    )
    assert len(theirs) == 10
    assert_records_agree(ours, theirs, rtol=1e-10, atol=1e-12)


# -- parametrizations -------------------------------------------------------------------------------
PARAMETRIZATIONS_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.utils.parametrize as parametrize

def symmetric(X):
    return X.triu() + X.triu(1).transpose(-1, -2)

X = torch.rand(3, 3)
A = symmetric(X)
assert torch.allclose(A, A.T)  # A is symmetric
print(A)                        # Quick visual check

class LinearSymmetric(nn.Module):
    def __init__(self, n_features):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(n_features, n_features))

    def forward(self, x):
        A = symmetric(self.weight)
        return x @ A

layer = LinearSymmetric(3)
out = layer(torch.rand(8, 3))
record.append(out.detach().numpy().copy())

class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)

layer = nn.Linear(3, 3)
initialize(layer)
parametrize.register_parametrization(layer, "weight", Symmetric())

A = layer.weight
assert torch.allclose(A, A.T)  # A is symmetric
print(A)                       # Quick visual check
record.append(A.detach().numpy().copy())

class Skew(nn.Module):
    def forward(self, X):
        A = X.triu(1)
        return A - A.transpose(-1, -2)


cnn = nn.Conv2d(in_channels=5, out_channels=8, kernel_size=3)
initialize(cnn)
parametrize.register_parametrization(cnn, "weight", Skew())
# Print a few kernels
print(cnn.weight[0, 1])
print(cnn.weight[2, 2])
record.append(cnn.weight.detach().numpy().copy())

layer = nn.Linear(3, 3)
initialize(layer)
print(f"Unparametrized:\\n{layer}")
parametrize.register_parametrization(layer, "weight", Symmetric())
print(f"\\nParametrized:\\n{layer}")

print(layer.parametrizations)
print(layer.parametrizations.weight)
print(layer.parametrizations.weight[0])
print(dict(layer.named_parameters()))
record.append(list(dict(layer.named_parameters())))
print(layer.parametrizations.weight.original)

symmetric = Symmetric()
weight_orig = layer.parametrizations.weight.original
print(torch.dist(layer.weight, symmetric(weight_orig)))
record.append(torch.dist(layer.weight, symmetric(weight_orig)).item())

class NoisyParametrization(nn.Module):
    def forward(self, X):
        print("Computing the Parametrization")
        return X

layer = nn.Linear(4, 4)
parametrize.register_parametrization(layer, "weight", NoisyParametrization())
print("Here, layer.weight is recomputed every time we call it")
foo = layer.weight + layer.weight.T
bar = layer.weight.sum()
with parametrize.cached():
    print("Here, it is computed just the first time layer.weight is called")
    foo = layer.weight + layer.weight.T
    bar = layer.weight.sum()

class CayleyMap(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("Id", torch.eye(n))

    def forward(self, X):
        # (I + X)(I - X)^{-1}
        return torch.linalg.solve(self.Id - X, self.Id + X)

layer = nn.Linear(3, 3)
initialize(layer)
parametrize.register_parametrization(layer, "weight", Skew())
parametrize.register_parametrization(layer, "weight", CayleyMap(3))
X = layer.weight
print(torch.dist(X.T @ X, torch.eye(3)))  # X is orthogonal
record.append(X.detach().numpy().copy())

class MatrixExponential(nn.Module):
    def forward(self, X):
        return torch.matrix_exp(X)

layer_orthogonal = nn.Linear(3, 3)
initialize(layer_orthogonal)
parametrize.register_parametrization(layer_orthogonal, "weight", Skew())
parametrize.register_parametrization(layer_orthogonal, "weight", MatrixExponential())
X = layer_orthogonal.weight
print(torch.dist(X.T @ X, torch.eye(3)))         # X is orthogonal
record.append(X.detach().numpy().copy())

layer_spd = nn.Linear(3, 3)
initialize(layer_spd)
parametrize.register_parametrization(layer_spd, "weight", Symmetric())
parametrize.register_parametrization(layer_spd, "weight", MatrixExponential())
X = layer_spd.weight
print(torch.dist(X, X.T))                        # X is symmetric
print((torch.linalg.eigvalsh(X) > 0.).all())  # X is positive definite
record.append(torch.linalg.eigvalsh(X).detach().numpy().copy())

class Skew(nn.Module):
    def forward(self, X):
        A = X.triu(1)
        return A - A.transpose(-1, -2)

    def right_inverse(self, A):
        # We assume that A is skew-symmetric
        # We take the upper-triangular elements, as these are those used in the forward
        return A.triu(1)

layer = nn.Linear(3, 3)
skew = Skew()
parametrize.register_parametrization(layer, "weight", skew)
X = torch.rand(3, 3)
X = X - X.T                             # X is now skew-symmetric
layer.weight = X                        # Initialize layer.weight to be X
print(torch.dist(layer.weight, X))      # layer.weight == X
record.append(layer.parametrizations.weight.original.detach().numpy().copy())

class CayleyMap(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("Id", torch.eye(n))

    def forward(self, X):
        # Assume X skew-symmetric
        # (I + X)(I - X)^{-1}
        return torch.linalg.solve(self.Id - X, self.Id + X)

    def right_inverse(self, A):
        # Assume A orthogonal
        # See https://en.wikipedia.org/wiki/Cayley_transform#Matrix_map
        # (A - I)(A + I)^{-1}
        return torch.linalg.solve(A + self.Id, self.Id - A)

layer_orthogonal = nn.Linear(3, 3)
parametrize.register_parametrization(layer_orthogonal, "weight", Skew())
parametrize.register_parametrization(layer_orthogonal, "weight", CayleyMap(3))
# Sample an orthogonal matrix with positive determinant
X = torch.tensor(orthogonal)
if X.det() < 0.:
    X[0].neg_()
layer_orthogonal.weight = X
print(torch.dist(layer_orthogonal.weight, X))  # layer_orthogonal.weight == X
record.append(layer_orthogonal.parametrizations.weight.original.detach().numpy().copy())

layer = nn.Linear(3, 3)
initialize(layer)
print("Before:")
print(layer)
print(layer.weight)
parametrize.register_parametrization(layer, "weight", Skew())
print("\\nParametrized:")
print(layer)
print(layer.weight)
parametrize.remove_parametrizations(layer, "weight")
print("\\nAfter. Weight has skew-symmetric values but it is unconstrained:")
print(layer)
print(layer.weight)
record.append(params_of(layer))

layer = nn.Linear(3, 3)
initialize(layer)
print("Before:")
print(layer)
print(layer.weight)
parametrize.register_parametrization(layer, "weight", Skew())
print("\\nParametrized:")
print(layer)
print(layer.weight)
parametrize.remove_parametrizations(layer, "weight", leave_parametrized=False)
print("\\nAfter. Same as Before:")
print(layer)
print(layer.weight)
record.append(params_of(layer))

# beyond the tutorial: an orthogonal layer trained
model = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1))
initialize(model)
parametrize.register_parametrization(model[0], "weight", Skew())
parametrize.register_parametrization(model[0], "weight", CayleyMap(3))
optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
inputs, targets = torch.rand(8, 3), torch.rand(8, 1)
for step in range(3):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append(params_of(model))
record.append(model[0].weight.detach().numpy().copy())
"""

PARAMETRIZATIONS_STEPS = [
    ("\nimport torch\nimport torch.nn as nn\nimport torch.nn.utils.parametrize as parametrize\n",
     "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.utils.parametrize as parametrize\n"),
    ("    loss.backward()\n    optimizer.step()\n", "    grads = loss.backward()\n    optimizer.step(grads)\n"),
]  # fmt: skip


def test_parametrizations_tutorial_as_torch(capsys):
    orthogonal = np.linalg.qr(np.random.default_rng(9403).standard_normal((3, 3)))[0]
    (theirs, ours), logs = runs_with_draws(
        PARAMETRIZATIONS_SOURCE, PARAMETRIZATIONS_STEPS, capsys, 9403, initialize=initializer(),
        params_of=params_of, orthogonal=orthogonal.astype(np.float32),
    )  # fmt: skip
    assert len(theirs) == 17
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
    # computed at registration and at each read, but once inside ``cached()``
    assert logs[1].count("Computing the Parametrization") == 5
    assert logs[0].count("Computing the Parametrization") == 5


# -- the saving and loading recipes, warmstarting, zeroing out gradients ----------------------------
RECIPES_SOURCE = """
import torch
import torch.nn as nn
import torch.optim as optim
import torch.nn.functional as F

class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(-1, 16 * 5 * 5)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x

net = Net()
initialize(net)
print(net)

optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)

# Print model's state_dict
print("Model's state_dict:")
for param_tensor in net.state_dict():
    print(param_tensor, "\\t", net.state_dict()[param_tensor].size())
    record.append(list(net.state_dict()[param_tensor].size()))

print()

# Print optimizer's state_dict
print("Optimizer's state_dict:")
for var_name in optimizer.state_dict():
    print(var_name, "\\t", optimizer.state_dict()[var_name])
record.append(optimizer.state_dict()["param_groups"][0]["params"])

# Zeroing out gradients in PyTorch
criterion = nn.CrossEntropyLoss()
for epoch in range(2):  # loop over the dataset multiple times

    running_loss = 0.0
    for i, data in enumerate(trainloader, 0):
        # get the inputs; data is a list of [inputs, labels]
        inputs, labels = data

        # zero the parameter gradients
        optimizer.zero_grad()

        # forward + backward + optimize
        outputs = net(inputs)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()

        # print statistics
        running_loss += loss.item()
        if i % 2000 == 1999:    # print every 2000 mini-batches
            print('[%d, %5d] loss: %.3f' %
                  (epoch + 1, i + 1, running_loss / 2000))
            running_loss = 0.0
    record.append(running_loss)

print('Finished Training')

# Specify a path
PATH = directory + "/state_dict_model.pt"

# Save
torch.save(net.state_dict(), PATH)

# Load
model = Net()
model.load_state_dict(torch.load(PATH, weights_only=True))
model.eval()
record.append(params_of(model))

# Additional information
EPOCH = 5
PATH = directory + "/model.pt"
LOSS = 0.4

torch.save({
            'epoch': EPOCH,
            'model_state_dict': net.state_dict(),
            'optimizer_state_dict': optimizer.state_dict(),
            'loss': LOSS,
            }, PATH)

model = Net()
optimizer = optim.SGD(model.parameters(), lr=0.001, momentum=0.9)

checkpoint = torch.load(PATH, weights_only=True)
model.load_state_dict(checkpoint['model_state_dict'])
optimizer.load_state_dict(checkpoint['optimizer_state_dict'])
epoch = checkpoint['epoch']
loss = checkpoint['loss']

model.eval()
# - or -
model.train()

# resumed: the momentum buffers came back with the checkpoint
for inputs, labels in trainloader:
    optimizer.zero_grad()
    loss = criterion(model(inputs), labels)
    loss.backward()
    optimizer.step()
record.append(params_of(model))

netA = Net()
netB = Net()
initialize(netA)
initialize(netB)
optimizerA = optim.SGD(netA.parameters(), lr=0.001, momentum=0.9)
optimizerB = optim.SGD(netB.parameters(), lr=0.001, momentum=0.9)

# Specify a path to save to
PATH = directory + "/model.pt"

torch.save({
            'modelA_state_dict': netA.state_dict(),
            'modelB_state_dict': netB.state_dict(),
            'optimizerA_state_dict': optimizerA.state_dict(),
            'optimizerB_state_dict': optimizerB.state_dict(),
            }, PATH)

modelA = Net()
modelB = Net()
optimModelA = optim.SGD(modelA.parameters(), lr=0.001, momentum=0.9)
optimModelB = optim.SGD(modelB.parameters(), lr=0.001, momentum=0.9)

checkpoint = torch.load(PATH, weights_only=True)
modelA.load_state_dict(checkpoint['modelA_state_dict'])
modelB.load_state_dict(checkpoint['modelB_state_dict'])
optimModelA.load_state_dict(checkpoint['optimizerA_state_dict'])
optimModelB.load_state_dict(checkpoint['optimizerB_state_dict'])

modelA.eval()
modelB.eval()
# - or -
modelA.train()
modelB.train()
record.append(params_of(modelA, modelB))

# Warmstarting model using parameters from a different model
class NetB(nn.Module):
    def __init__(self):
        super(NetB, self).__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(-1, 16 * 5 * 5)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.head(self.fc3(x))

netB = NetB()
initialize(netB)
# Specify a path to save to
PATH = directory + "/model.pt"

torch.save(netA.state_dict(), PATH)
state = torch.load(PATH, weights_only=True)
del state["fc3.weight"], state["fc3.bias"]  # (a different head: its shape would not load)
result = netB.load_state_dict(state, strict=False)
print(result)
record.append(sorted(result.missing_keys))
record.append(sorted(result.unexpected_keys))
optimizer = optim.SGD(netB.parameters(), lr=0.01, momentum=0.9)
for inputs, labels in trainloader:
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(netB(inputs), labels % 2)
    loss.backward()
    optimizer.step()
record.append(params_of(netB))

# Saving & Loading Model Across Devices
device = torch.device("cpu")
model = Net()
model.load_state_dict(torch.load(directory + "/state_dict_model.pt", map_location=device, weights_only=True))
model.to(device)
record.append(params_of(model))
"""

RECIPES_STEPS = [
    ("\nimport torch\nimport torch.nn as nn\nimport torch.optim as optim\nimport torch.nn.functional as F\n",
     "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\nimport retrograd.nn.functional as F\n"),
    ("        loss.backward()\n        optimizer.step()\n", "        grads = loss.backward()\n        optimizer.step(grads)\n"),
    ("    loss.backward()\n    optimizer.step()\n", "    grads = loss.backward()\n    optimizer.step(grads)\n"),
]  # fmt: skip


def test_saving_loading_warmstarting_and_zeroing_recipes_as_torch(capsys, tmp_path):
    rng = np.random.default_rng(9404)
    batches = [
        (rng.uniform(-1, 1, (2, 3, 32, 32)).astype(np.float32), rng.integers(0, 10, 2))
        for _ in range(2)
    ]
    records = []
    for lib in (torch, rg):
        names = {"trainloader": [(lib.tensor(x), lib.tensor(y)) for x, y in batches]}
        directory = tmp_path / lib.__name__
        directory.mkdir()
        names["directory"] = str(directory)
        records.append(names)
    (theirs, ours), _ = runs_with_draws(
        RECIPES_SOURCE, RECIPES_STEPS, capsys, 9404, initialize=initializer(), params_of=params_of,
        make_trainloader=lambda lib: records[lib is rg]["trainloader"],
        make_directory=lambda lib: records[lib is rg]["directory"],
    )  # fmt: skip
    assert len(theirs) == 20
    assert theirs[0] == [6, 3, 5, 5] and theirs[-4] == [
        "fc3.bias",
        "fc3.weight",
        "head.bias",
        "head.weight",
    ]
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


# -- Reasoning about Shapes in PyTorch (small sizes) ------------------------------------------------
SHAPES_SOURCE = """
import torch

t = torch.rand(2, 3, 10, 10, device="meta")
conv = torch.nn.Conv2d(3, 5, 2, device="meta")
out = conv(t)
print(out.shape)
record.append([list(out.shape), out.device.type, out.is_meta])

import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)  # flatten all dimensions except batch
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x

def fw_hook(module, input, output):
    print(f"Shape of output to {module} is {output.shape}.")
    record.append([type(module).__name__, list(output.shape)])


# Any tensor created within this torch.device context manager will be
# on the meta device.
with torch.device("meta"):
    net = Net()
    inp = torch.randn((4, 3, 32, 32))

record.append([p.device.type for p in net.parameters()] + [inp.device.type])

for name, layer in net.named_modules():
    layer.register_forward_hook(fw_hook)

out = net(inp)

# materialized on the CPU: the weights initialized again, from torch's
net.to_empty(device="cpu")
initialize(net)
record.append([p.device.type for p in net.parameters()] + [torch.empty(1).device.type])
record.append(net(torch.ones(1, 3, 32, 32)).detach().numpy().copy())
"""


def test_reasoning_about_shapes_on_the_meta_device_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        SHAPES_SOURCE, [("\nimport torch\n", "\nimport retrograd as torch\n"),
                        ("import torch.nn as nn\nimport torch.nn.functional as F\n",
                         "import retrograd.nn as nn\nimport retrograd.nn.functional as F\n")],
        capsys, 9405, initialize=initializer(),
    )  # fmt: skip
    assert len(theirs) == 20 and theirs[1] == ["meta"] * 11 and theirs[10] == ["cpu"] * 11
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
