# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
the first edition of "Learning PyTorch with Examples" (pytorch/tutorials
``beginner_source/examples_*/two_layer_net_*.py``, the fully-connected ReLU network of
``N, D_in, H, D_out = 64, 1000, 100, 10`` fitted to random data, which the tutorial shipped until
the polynomial series replaced it, and which countless courses still copy), every step, against
torch's run of the same code from the same draws (``torch.randn``; torch's ``nn.Linear`` weights
loaded into the port):

- ``two_layer_net_tensor.py``: backprop written by hand (``x.mm(w1)``, ``h.clamp(min=0)``,
  ``h_relu.t().mm(grad_y_pred)``, ``grad_h = grad_h_relu.clone(); grad_h[h < 0] = 0``) and
  ``w1 -= learning_rate * grad_w1``;
- ``two_layer_net_autograd.py``: ``requires_grad=True`` weights updated under ``no_grad``
  from ``w1.grad`` (``w1.grad.zero_()`` after);
- ``two_layer_net_custom_function.py``: ``MyReLU(torch.autograd.Function)`` whose backward
  clones ``grad_output`` and zeroes it where ``input < 0`` by boolean-mask assignment;
- ``two_layer_net_nn.py``: ``nn.Sequential(Linear, ReLU, Linear)``, ``MSELoss(reduction='sum')``,
  ``model.zero_grad()`` and ``param -= learning_rate * param.grad``;
- ``two_layer_net_optim.py``: the same under ``torch.optim.Adam``;
- ``two_layer_net_module.py``: ``TwoLayerNet`` (``super(TwoLayerNet, self).__init__()``) and
  ``optim.SGD``;
- ``dynamic_net.py``: ``DynamicNet`` reusing ``middle_linear`` ``random.randint(0, 3)`` times
  per forward (Python's ``random`` seeded alike), ``SGD`` with momentum.

Smaller: 150 steps each rather than 500 (the losses every 50 recorded).

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``w1.grad(grads)``, ``optimizer.step(grads)``; torch's ``w1.grad.zero_()`` dropped: each
backward returns fresh gradients).
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


# -- examples_tensor/two_layer_net_tensor.py -----------------------------------------------------
TENSOR_SOURCE = """
import torch


dtype = torch.float
device = torch.device("cpu")
# device = torch.device("cuda:0") # Uncomment this to run on GPU

# N is batch size; D_in is input dimension;
# H is hidden dimension; D_out is output dimension.
N, D_in, H, D_out = 64, 1000, 100, 10

# Create random input and output data
x = torch.randn(N, D_in, device=device, dtype=dtype)
y = torch.randn(N, D_out, device=device, dtype=dtype)

# Randomly initialize weights
w1 = torch.randn(D_in, H, device=device, dtype=dtype)
w2 = torch.randn(H, D_out, device=device, dtype=dtype)

learning_rate = 1e-6
for t in range(n_steps):
    # Forward pass: compute predicted y
    h = x.mm(w1)
    h_relu = h.clamp(min=0)
    y_pred = h_relu.mm(w2)

    # Compute and print loss
    loss = (y_pred - y).pow(2).sum().item()
    if t % 50 == 49:
        print(t, loss)
        record.append(loss)

    # Backprop to compute gradients of w1 and w2 with respect to loss
    grad_y_pred = 2.0 * (y_pred - y)
    grad_w2 = h_relu.t().mm(grad_y_pred)
    grad_h_relu = grad_y_pred.mm(w2.t())
    grad_h = grad_h_relu.clone()
    grad_h[h < 0] = 0
    grad_w1 = x.t().mm(grad_h)

    # Update weights using gradient descent
    w1 -= learning_rate * grad_w1
    w2 -= learning_rate * grad_w2

record.append({"w1": w1.numpy().copy(), "w2": w2.numpy().copy()})
"""

TENSOR_STEPS = [("import torch\n", "import retrograd as torch\n")]


# -- examples_autograd/two_layer_net_autograd.py -------------------------------------------------
AUTOGRAD_SOURCE = """
import torch

dtype = torch.float
device = torch.device("cpu")
# device = torch.device("cuda:0") # Uncomment this to run on GPU

# N is batch size; D_in is input dimension;
# H is hidden dimension; D_out is output dimension.
N, D_in, H, D_out = 64, 1000, 100, 10

# Create random Tensors to hold input and outputs.
# Setting requires_grad=False indicates that we do not need to compute gradients
# with respect to these Tensors during the backward pass.
x = torch.randn(N, D_in, device=device, dtype=dtype)
y = torch.randn(N, D_out, device=device, dtype=dtype)

# Create random Tensors for weights.
# Setting requires_grad=True indicates that we want to compute gradients with
# respect to these Tensors during the backward pass.
w1 = torch.randn(D_in, H, device=device, dtype=dtype, requires_grad=True)
w2 = torch.randn(H, D_out, device=device, dtype=dtype, requires_grad=True)

learning_rate = 1e-6
for t in range(n_steps):
    # Forward pass: compute predicted y using operations on Tensors; these
    # are exactly the same operations we used to compute the forward pass using
    # Tensors, but we do not need to keep references to intermediate values since
    # we are not implementing the backward pass by hand.
    y_pred = x.mm(w1).clamp(min=0).mm(w2)

    # Compute and print loss using operations on Tensors.
    # Now loss is a Tensor of shape (1,)
    # loss.item() gets the scalar value held in the loss.
    loss = (y_pred - y).pow(2).sum()
    if t % 50 == 49:
        print(t, loss.item())
        record.append(loss.item())

    # Use autograd to compute the backward pass. This call will compute the
    # gradient of loss with respect to all Tensors with requires_grad=True.
    # After this call w1.grad and w2.grad will be Tensors holding the gradient
    # of the loss with respect to w1 and w2 respectively.
    loss.backward()

    # Manually update weights using gradient descent. Wrap in torch.no_grad()
    # because weights have requires_grad=True, but we don't need to track this
    # in autograd.
    # An alternative way is to operate on weight.data and weight.grad.data.
    # Recall that tensor.data gives a tensor that shares the storage with
    # tensor, but doesn't track history.
    # You can also use torch.optim.SGD to achieve this.
    with torch.no_grad():
        w1 -= learning_rate * w1.grad
        w2 -= learning_rate * w2.grad

        # Manually zero the gradients after updating weights
        w1.grad.zero_()
        w2.grad.zero_()

record.append({"w1": w1.detach().numpy().copy(), "w2": w2.detach().numpy().copy()})
record.append([w1.is_leaf, w1.requires_grad, y_pred.grad_fn is not None])
"""

AUTOGRAD_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("w1 -= learning_rate * w1.grad\n", "w1 -= learning_rate * w1.grad(grads)\n"),
    ("w2 -= learning_rate * w2.grad\n", "w2 -= learning_rate * w2.grad(grads)\n"),
    (
        "\n        # Manually zero the gradients after updating weights\n        w1.grad.zero_()\n        w2.grad.zero_()\n",
        "",
    ),
]


# -- examples_autograd/two_layer_net_custom_function.py ------------------------------------------
CUSTOM_FUNCTION_SOURCE = """
import torch


class MyReLU(torch.autograd.Function):
    \"\"\"
    We can implement our own custom autograd Functions by subclassing
    torch.autograd.Function and implementing the forward and backward passes
    which operate on Tensors.
    \"\"\"

    @staticmethod
    def forward(ctx, input):
        \"\"\"
        In the forward pass we receive a Tensor containing the input and return
        a Tensor containing the output. ctx is a context object that can be used
        to stash information for backward computation. You can cache arbitrary
        objects for use in the backward pass using the ctx.save_for_backward method.
        \"\"\"
        ctx.save_for_backward(input)
        return input.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        \"\"\"
        In the backward pass we receive a Tensor containing the gradient of the loss
        with respect to the output, and we need to compute the gradient of the loss
        with respect to the input.
        \"\"\"
        input, = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[input < 0] = 0
        return grad_input


dtype = torch.float
device = torch.device("cpu")
# device = torch.device("cuda:0") # Uncomment this to run on GPU

# N is batch size; D_in is input dimension;
# H is hidden dimension; D_out is output dimension.
N, D_in, H, D_out = 64, 1000, 100, 10

# Create random Tensors to hold input and outputs.
x = torch.randn(N, D_in, device=device, dtype=dtype)
y = torch.randn(N, D_out, device=device, dtype=dtype)

# Create random Tensors for weights.
w1 = torch.randn(D_in, H, device=device, dtype=dtype, requires_grad=True)
w2 = torch.randn(H, D_out, device=device, dtype=dtype, requires_grad=True)

learning_rate = 1e-6
for t in range(n_steps):
    # To apply our Function, we use Function.apply method. We alias this as 'relu'.
    relu = MyReLU.apply

    # Forward pass: compute predicted y using operations; we compute
    # ReLU using our custom autograd operation.
    y_pred = relu(x.mm(w1)).mm(w2)

    # Compute and print loss
    loss = (y_pred - y).pow(2).sum()
    if t % 50 == 49:
        print(t, loss.item())
        record.append(loss.item())

    # Use autograd to compute the backward pass.
    loss.backward()

    # Update weights using gradient descent
    with torch.no_grad():
        w1 -= learning_rate * w1.grad
        w2 -= learning_rate * w2.grad

        # Manually zero the gradients after updating weights
        w1.grad.zero_()
        w2.grad.zero_()

record.append({"w1": w1.detach().numpy().copy(), "w2": w2.detach().numpy().copy()})
"""


@pytest.mark.parametrize("which", ["tensor", "autograd", "custom_function"])
def test_two_layer_net_by_hand_autograd_and_custom_relu_as_torch(capsys, which):
    source, steps = {
        "tensor": (TENSOR_SOURCE, TENSOR_STEPS),
        "autograd": (AUTOGRAD_SOURCE, AUTOGRAD_STEPS),
        "custom_function": (CUSTOM_FUNCTION_SOURCE, AUTOGRAD_STEPS),
    }[which]
    (theirs, ours), _ = runs_with_draws(source, steps, capsys, 26201, n_steps=150)
    assert theirs[2] < theirs[0]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-4)
    if which == "autograd":
        assert theirs[-1] == [True, True, True]


# -- examples_nn/two_layer_net_nn.py, two_layer_net_optim.py -------------------------------------
NN_SOURCE = """
import torch

# N is batch size; D_in is input dimension;
# H is hidden dimension; D_out is output dimension.
N, D_in, H, D_out = 64, 1000, 100, 10

# Create random Tensors to hold inputs and outputs
x = torch.randn(N, D_in)
y = torch.randn(N, D_out)

# Use the nn package to define our model as a sequence of layers. nn.Sequential
# is a Module which contains other Modules, and applies them in sequence to
# produce its output. Each Linear Module computes output from input using a
# linear function, and holds internal Tensors for its weight and bias.
model = torch.nn.Sequential(
    torch.nn.Linear(D_in, H),
    torch.nn.ReLU(),
    torch.nn.Linear(H, D_out),
)
initialize(model)

# The nn package also contains definitions of popular loss functions; in this
# case we will use Mean Squared Error (MSE) as our loss function.
loss_fn = torch.nn.MSELoss(reduction='sum')

learning_rate = 1e-4
for t in range(n_steps):
    # Forward pass: compute predicted y by passing x to the model. Module objects
    # override the __call__ operator so you can call them like functions. When
    # doing so you pass a Tensor of input data to the Module and it produces
    # a Tensor of output data.
    y_pred = model(x)

    # Compute and print loss. We pass Tensors containing the predicted and true
    # values of y, and the loss function returns a Tensor containing the
    # loss.
    loss = loss_fn(y_pred, y)
    if t % 50 == 49:
        print(t, loss.item())
        record.append(loss.item())

    # Zero the gradients before running the backward pass.
    model.zero_grad()

    # Backward pass: compute gradient of the loss with respect to all the learnable
    # parameters of the model. Internally, the parameters of each Module are stored
    # in Tensors with requires_grad=True, so this call will compute gradients for
    # all learnable parameters in the model.
    loss.backward()

    # Update the weights using gradient descent. Each parameter is a Tensor, so
    # we can access its gradients like we did before.
    with torch.no_grad():
        for param in model.parameters():
            param -= learning_rate * param.grad

record.append(params_of(model))
"""

NN_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("param -= learning_rate * param.grad\n", "param -= learning_rate * param.grad(grads)\n"),
]

OPTIM_SOURCE = """
import torch

# N is batch size; D_in is input dimension;
# H is hidden dimension; D_out is output dimension.
N, D_in, H, D_out = 64, 1000, 100, 10

# Create random Tensors to hold inputs and outputs
x = torch.randn(N, D_in)
y = torch.randn(N, D_out)

# Use the nn package to define our model and loss function.
model = torch.nn.Sequential(
    torch.nn.Linear(D_in, H),
    torch.nn.ReLU(),
    torch.nn.Linear(H, D_out),
)
initialize(model)
loss_fn = torch.nn.MSELoss(reduction='sum')

# Use the optim package to define an Optimizer that will update the weights of
# the model for us. Here we will use Adam; the optim package contains many other
# optimization algorithms. The first argument to the Adam constructor tells the
# optimizer which Tensors it should update.
learning_rate = 1e-4
optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
for t in range(n_steps):
    # Forward pass: compute predicted y by passing x to the model.
    y_pred = model(x)

    # Compute and print loss.
    loss = loss_fn(y_pred, y)
    if t % 50 == 49:
        print(t, loss.item())
        record.append(loss.item())

    # Before the backward pass, use the optimizer object to zero all of the
    # gradients for the variables it will update (which are the learnable
    # weights of the model). This is because by default, gradients are
    # accumulated in buffers( i.e, not overwritten) whenever .backward()
    # is called. Checkout docs of torch.autograd.backward for more details.
    optimizer.zero_grad()

    # Backward pass: compute gradient of the loss with respect to model
    # parameters
    loss.backward()

    # Calling the step function on an Optimizer makes an update to its
    # parameters
    optimizer.step()

record.append(params_of(model))
"""

OPTIM_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
]


# -- examples_nn/two_layer_net_module.py, dynamic_net.py -----------------------------------------
MODULE_SOURCE = """
import torch


class TwoLayerNet(torch.nn.Module):
    def __init__(self, D_in, H, D_out):
        \"\"\"
        In the constructor we instantiate two nn.Linear modules and assign them as
        member variables.
        \"\"\"
        super(TwoLayerNet, self).__init__()
        self.linear1 = torch.nn.Linear(D_in, H)
        self.linear2 = torch.nn.Linear(H, D_out)

    def forward(self, x):
        \"\"\"
        In the forward function we accept a Tensor of input data and we must return
        a Tensor of output data. We can use Modules defined in the constructor as
        well as arbitrary operators on Tensors.
        \"\"\"
        h_relu = self.linear1(x).clamp(min=0)
        y_pred = self.linear2(h_relu)
        return y_pred


# N is batch size; D_in is input dimension;
# H is hidden dimension; D_out is output dimension.
N, D_in, H, D_out = 64, 1000, 100, 10

# Create random Tensors to hold inputs and outputs
x = torch.randn(N, D_in)
y = torch.randn(N, D_out)

# Construct our model by instantiating the class defined above
model = TwoLayerNet(D_in, H, D_out)
initialize(model)

# Construct our loss function and an Optimizer. The call to model.parameters()
# in the SGD constructor will contain the learnable parameters of the two
# nn.Linear modules which are members of the model.
criterion = torch.nn.MSELoss(reduction='sum')
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
for t in range(n_steps):
    # Forward pass: Compute predicted y by passing x to the model
    y_pred = model(x)

    # Compute and print loss
    loss = criterion(y_pred, y)
    if t % 50 == 49:
        print(t, loss.item())
        record.append(loss.item())

    # Zero gradients, perform a backward pass, and update the weights.
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

record.append(params_of(model))
"""

DYNAMIC_SOURCE = """
import random
import torch


class DynamicNet(torch.nn.Module):
    def __init__(self, D_in, H, D_out):
        \"\"\"
        In the constructor we construct three nn.Linear instances that we will use
        in the forward pass.
        \"\"\"
        super(DynamicNet, self).__init__()
        self.input_linear = torch.nn.Linear(D_in, H)
        self.middle_linear = torch.nn.Linear(H, H)
        self.output_linear = torch.nn.Linear(H, D_out)

    def forward(self, x):
        \"\"\"
        For the forward pass of the model, we randomly choose either 0, 1, 2, or 3
        and reuse the middle_linear Module that many times to compute hidden layer
        representations.

        Since each forward pass builds a dynamic computation graph, we can use normal
        Python control-flow operators like loops or conditional statements when
        defining the forward pass of the model.

        Here we also see that it is perfectly safe to reuse the same Module many
        times when defining a computational graph. This is a big improvement from Lua
        Torch, where each Module could be used only once.
        \"\"\"
        h_relu = self.input_linear(x).clamp(min=0)
        for _ in range(random.randint(0, 3)):
            h_relu = self.middle_linear(h_relu).clamp(min=0)
        y_pred = self.output_linear(h_relu)
        return y_pred


# N is batch size; D_in is input dimension;
# H is hidden dimension; D_out is output dimension.
N, D_in, H, D_out = 64, 1000, 100, 10

# Create random Tensors to hold inputs and outputs
x = torch.randn(N, D_in)
y = torch.randn(N, D_out)

# Construct our model by instantiating the class defined above
model = DynamicNet(D_in, H, D_out)
initialize(model)

# Construct our loss function and an Optimizer. Training this strange model with
# vanilla stochastic gradient descent is tough, so we use momentum
criterion = torch.nn.MSELoss(reduction='sum')
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
for t in range(n_steps):
    # Forward pass: Compute predicted y by passing x to the model
    y_pred = model(x)

    # Compute and print loss
    loss = criterion(y_pred, y)
    if t % 50 == 49:
        print(t, loss.item())
        record.append(loss.item())

    # Zero gradients, perform a backward pass, and update the weights.
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

record.append(params_of(model))
"""


@pytest.mark.parametrize("which", ["nn", "optim", "module", "dynamic"])
def test_two_layer_net_nn_optim_module_and_dynamic_net_as_torch(capsys, which):
    source, steps = {
        "nn": (NN_SOURCE, NN_STEPS),
        "optim": (OPTIM_SOURCE, OPTIM_STEPS),
        "module": (MODULE_SOURCE, OPTIM_STEPS),
        "dynamic": (DYNAMIC_SOURCE, OPTIM_STEPS),
    }[which]
    (theirs, ours), _ = runs_with_draws(
        source, steps, capsys, 26202, n_steps=150, initialize=initializer(), params_of=params_of
    )
    assert len(theirs) == 4
    assert theirs[2] < theirs[0]
    # under Adam, the one hidden unit that ReLU all but silences (row 77 of the first weight)
    # has a gradient near the rounding noise, which Adam normalizes to full-size steps
    atol = 5e-5 if which == "optim" else 1e-5
    assert_records_agree(ours, theirs, rtol=2e-4, atol=atol)
