# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
"Learning PyTorch with Examples" (pytorch/tutorials ``beginner_source/pytorch_with_examples.rst``
and its ``examples_tensor``, ``examples_autograd`` and ``examples_nn`` programs), the third-order
polynomial fitted to ``sin(x)`` on ``[-pi, pi]``, every step of the series, against torch's run of
the same code from the same draws (``torch.randn(())`` for the coefficients; torch's
``nn.Linear`` weights loaded into the port):

- ``polynomial_tensor.py``: the gradients written by hand, ``a -= learning_rate * grad_a`` on
  0-d tensors, ``torch.linspace(..., device=device, dtype=dtype)``;
- ``polynomial_autograd.py``: ``torch.randn((), requires_grad=True)`` updated under
  ``torch.no_grad()`` from ``a.grad``;
- ``polynomial_custom_function.py``: ``LegendrePolynomial3(torch.autograd.Function)`` with
  ``ctx.save_for_backward`` and ``ctx.saved_tensors``, ``torch.full((), 0.0, ...,
  requires_grad=True)``, ``P3 = LegendrePolynomial3.apply``;
- ``polynomial_nn.py``: ``x.unsqueeze(-1).pow(p)`` with an int64 ``p``, ``nn.Sequential(
  nn.Linear(3, 1), nn.Flatten(0, 1))``, ``MSELoss(reduction='sum')``, ``model.zero_grad()`` and
  ``param -= learning_rate * param.grad``, ``linear_layer.weight[:, 0].item()``;
- ``polynomial_optim.py``: the same model under ``torch.optim.RMSprop``;
- ``polynomial_module.py``: ``Polynomial3(torch.nn.Module)`` of four 0-d ``nn.Parameter`` s and
  its ``string()`` of ``.item()`` s, ``optim.SGD``;
- ``dynamic_net.py``: ``DynamicNet`` whose forward adds ``random.randint(4, 6)``-many higher
  terms sharing one parameter (Python's ``random`` seeded alike in both runs), ``SGD`` with
  momentum.

Smaller: a few hundred steps each rather than 2000 (30000 for the dynamic net), printing
every 100 (the printed losses are compared through the records, to float tolerance).

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``a.grad(grads)``, ``optimizer.step(grads)``; torch's ``a.grad = None`` resets dropped: each
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


# -- examples_tensor/polynomial_tensor.py --------------------------------------------------------
TENSOR_SOURCE = """
import torch
import math


dtype = torch.float
device = torch.device("cpu")
# device = torch.device("cuda:0") # Uncomment this to run on GPU

# Create random input and output data
x = torch.linspace(-math.pi, math.pi, 2000, device=device, dtype=dtype)
y = torch.sin(x)

# Randomly initialize weights
a = torch.randn((), device=device, dtype=dtype)
b = torch.randn((), device=device, dtype=dtype)
c = torch.randn((), device=device, dtype=dtype)
d = torch.randn((), device=device, dtype=dtype)

learning_rate = 1e-6
for t in range(n_steps):
    # Forward pass: compute predicted y
    y_pred = a + b * x + c * x ** 2 + d * x ** 3

    # Compute and print loss
    loss = (y_pred - y).pow(2).sum().item()
    if t % 100 == 99:
        print(t, loss)
        record.append(loss)

    # Backprop to compute gradients of a, b, c, d with respect to loss
    grad_y_pred = 2.0 * (y_pred - y)
    grad_a = grad_y_pred.sum()
    grad_b = (grad_y_pred * x).sum()
    grad_c = (grad_y_pred * x ** 2).sum()
    grad_d = (grad_y_pred * x ** 3).sum()

    # Update weights using gradient descent
    a -= learning_rate * grad_a
    b -= learning_rate * grad_b
    c -= learning_rate * grad_c
    d -= learning_rate * grad_d


print(f'Result: y = {a.item()} + {b.item()} x + {c.item()} x^2 + {d.item()} x^3')
record.append([a.item(), b.item(), c.item(), d.item()])
record.append([type(a.item()).__name__, a.dtype == torch.float32, a.shape == torch.Size([]), x.dtype == dtype])
"""

TENSOR_STEPS = [("import torch\n", "import retrograd as torch\n")]


def test_polynomial_tensor_gradients_by_hand_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        TENSOR_SOURCE, TENSOR_STEPS, capsys, 26101, n_steps=300
    )
    assert len(theirs) == 5
    assert theirs[-1] == ["float", True, True, True]
    assert theirs[2] < theirs[0]  # the fit improves
    assert_records_agree(ours[:-1], theirs[:-1], rtol=1e-4, atol=1e-5)
    assert ours[-1] == theirs[-1]
    assert our_log.count("Result: y = ") == their_log.count("Result: y = ") == 1


# -- examples_autograd/polynomial_autograd.py ----------------------------------------------------
AUTOGRAD_SOURCE = """
import torch
import math

# We want to be able to train our model on an `accelerator <https://pytorch.org/docs/stable/torch.html#accelerators>`__
# such as CUDA, MPS, MTIA, or XPU. If the current accelerator is available, we will use it. Otherwise, we use the CPU.

dtype = torch.float
device = torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"
print(f"Using {device} device")
torch.set_default_device(device)

# Create Tensors to hold input and outputs.
# By default, requires_grad=False, which indicates that we do not need to
# compute gradients with respect to these Tensors during the backward pass.
x = torch.linspace(-1, 1, 2000, dtype=dtype)
y = torch.exp(x) # A Taylor expansion would be 1 + x + (1/2) x**2 + (1/3!) x**3 + ...

# Create random Tensors for weights. For a third order polynomial, we need
# 4 weights: y = a + b x + c x^2 + d x^3
# Setting requires_grad=True indicates that we want to compute gradients with
# respect to these Tensors during the backward pass.
a = torch.randn((), dtype=dtype, requires_grad=True)
b = torch.randn((), dtype=dtype, requires_grad=True)
c = torch.randn((), dtype=dtype, requires_grad=True)
d = torch.randn((), dtype=dtype, requires_grad=True)

initial_loss = 1.
learning_rate = 1e-5
for t in range(n_steps):
    # Forward pass: compute predicted y using operations on Tensors.
    y_pred = a + b * x + c * x ** 2 + d * x ** 3

    # Compute and print loss using operations on Tensors.
    # Now loss is a Tensor of shape (1,)
    # loss.item() gets the scalar value held in the loss.
    loss = (y_pred - y).pow(2).sum()

    # Calculare initial loss, so we can report loss relative to it
    if t==0:
        initial_loss=loss.item()

    if t % 100 == 99:
        print(f'Iteration t = {t:4d}  loss(t)/loss(0) = {round(loss.item()/initial_loss, 6):10.6f}  a = {a.item():10.6f}  b = {b.item():10.6f}  c = {c.item():10.6f}  d = {d.item():10.6f}')
        record.append([loss.item(), a.item(), b.item(), c.item(), d.item()])

    # Use autograd to compute the backward pass. This call will compute the
    # gradient of loss with respect to all Tensors with requires_grad=True.
    # After this call a.grad, b.grad. c.grad and d.grad will be Tensors holding
    # the gradient of the loss with respect to a, b, c, d respectively.
    loss.backward()

    # Manually update weights using gradient descent. Wrap in torch.no_grad()
    # because weights have requires_grad=True, but we don't need to track this
    # in autograd.
    with torch.no_grad():
        a -= learning_rate * a.grad
        b -= learning_rate * b.grad
        c -= learning_rate * c.grad
        d -= learning_rate * d.grad

        # Manually zero the gradients after updating weights
        a.grad = None
        b.grad = None
        c.grad = None
        d.grad = None

print(f'Result: y = {a.item()} + {b.item()} x + {c.item()} x^2 + {d.item()} x^3')
torch.set_default_device(None)
record.append([a.requires_grad, a.is_leaf, a.grad_fn is None, y_pred.requires_grad, device])
"""

AUTOGRAD_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("a -= learning_rate * a.grad\n", "a -= learning_rate * a.grad(grads)\n"),
    ("b -= learning_rate * b.grad\n", "b -= learning_rate * b.grad(grads)\n"),
    ("c -= learning_rate * c.grad\n", "c -= learning_rate * c.grad(grads)\n"),
    ("d -= learning_rate * d.grad\n", "d -= learning_rate * d.grad(grads)\n"),
    (
        "        # Manually zero the gradients after updating weights\n        a.grad = None\n        b.grad = None\n        c.grad = None\n        d.grad = None\n",
        "",
    ),
]


def test_polynomial_autograd_on_the_default_accelerator_as_torch(capsys):
    try:
        (theirs, ours), (their_log, our_log) = runs_with_draws(
            AUTOGRAD_SOURCE, AUTOGRAD_STEPS, capsys, 26102, n_steps=400
        )
    finally:
        # torch's set_default_device caches its factory functions on first use, here the
        # harness's stand-in draws: forgotten, so later tests' torch.device blocks see torch's
        torch.utils._device._device_constructors.cache_clear()
    assert len(theirs) == 5
    assert theirs[-1] == [True, True, True, True, "cpu"]
    assert_records_agree(ours[:-1], theirs[:-1], rtol=1e-4, atol=1e-5)
    assert ours[-1] == theirs[-1]
    assert our_log.splitlines()[0] == their_log.splitlines()[0] == "Using cpu device"


# -- examples_autograd/polynomial_custom_function.py ---------------------------------------------
CUSTOM_FUNCTION_SOURCE = """
import torch
import math


class LegendrePolynomial3(torch.autograd.Function):
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
        to stash information for backward computation. You can cache tensors for
        use in the backward pass using the ``ctx.save_for_backward`` method. Other
        objects can be stored directly as attributes on the ctx object, such as
        ``ctx.my_object = my_object``. Check out `Extending torch.autograd <https://docs.pytorch.org/docs/stable/notes/extending.html#extending-torch-autograd>`_
        for further details.
        \"\"\"
        ctx.save_for_backward(input)
        return 0.5 * (5 * input ** 3 - 3 * input)

    @staticmethod
    def backward(ctx, grad_output):
        \"\"\"
        In the backward pass we receive a Tensor containing the gradient of the loss
        with respect to the output, and we need to compute the gradient of the loss
        with respect to the input.
        \"\"\"
        input, = ctx.saved_tensors
        return grad_output * 1.5 * (5 * input ** 2 - 1)


dtype = torch.float
device = torch.device("cpu")
# device = torch.device("cuda:0")  # Uncomment this to run on GPU

# Create Tensors to hold input and outputs.
# By default, requires_grad=False, which indicates that we do not need to
# compute gradients with respect to these Tensors during the backward pass.
x = torch.linspace(-math.pi, math.pi, 2000, device=device, dtype=dtype)
y = torch.sin(x)

# Create random Tensors for weights. For this example, we need
# 4 weights: y = a + b * P3(c + d * x), these weights need to be initialized
# not too far from the correct result to ensure convergence.
# Setting requires_grad=True indicates that we want to compute gradients with
# respect to these Tensors during the backward pass.
a = torch.full((), 0.0, device=device, dtype=dtype, requires_grad=True)
b = torch.full((), -1.0, device=device, dtype=dtype, requires_grad=True)
c = torch.full((), 0.0, device=device, dtype=dtype, requires_grad=True)
d = torch.full((), 0.3, device=device, dtype=dtype, requires_grad=True)

learning_rate = 5e-6
for t in range(n_steps):
    # To apply our Function, we use Function.apply method. We alias this as 'P3'.
    P3 = LegendrePolynomial3.apply

    # Forward pass: compute predicted y using operations; we compute
    # P3 using our custom autograd operation.
    y_pred = a + b * P3(c + d * x)

    # Compute and print loss
    loss = (y_pred - y).pow(2).sum()
    if t % 100 == 99:
        print(t, loss.item())
        record.append(loss.item())

    # Use autograd to compute the backward pass.
    loss.backward()

    # Update weights using gradient descent
    with torch.no_grad():
        a -= learning_rate * a.grad
        b -= learning_rate * b.grad
        c -= learning_rate * c.grad
        d -= learning_rate * d.grad

        # Manually zero the gradients after updating weights
        a.grad = None
        b.grad = None
        c.grad = None
        d.grad = None

print(f'Result: y = {a.item()} + {b.item()} * P3({c.item()} + {d.item()} x)')
record.append([a.item(), b.item(), c.item(), d.item()])
"""

CUSTOM_FUNCTION_STEPS = AUTOGRAD_STEPS


def test_polynomial_custom_function_legendre_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        CUSTOM_FUNCTION_SOURCE, CUSTOM_FUNCTION_STEPS, capsys, 26103, n_steps=300
    )
    assert len(theirs) == 4
    assert theirs[2] < theirs[0]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- examples_nn/polynomial_nn.py and polynomial_optim.py ----------------------------------------
NN_SOURCE = """
import torch
import math


# Create Tensors to hold input and outputs.
x = torch.linspace(-math.pi, math.pi, 2000)
y = torch.sin(x)

# For this example, the output y is a linear function of (x, x^2, x^3), so
# we can consider it as a linear layer neural network. Let's prepare the
# tensor (x, x^2, x^3).
p = torch.tensor([1, 2, 3])
xx = x.unsqueeze(-1).pow(p)

# In the above code, x.unsqueeze(-1) has shape (2000, 1), and p has shape
# (3,), for this case, broadcasting semantics will apply to obtain a tensor
# of shape (2000, 3)

# Use the nn package to define our model as a sequence of layers. nn.Sequential
# is a Module which contains other Modules, and applies them in sequence to
# produce its output. The Linear Module computes output from input using a
# linear function, and holds internal Tensors for its weight and bias.
# The Flatten layer flatens the output of the linear layer to a 1D tensor,
# to match the shape of `y`.
model = torch.nn.Sequential(
    torch.nn.Linear(3, 1),
    torch.nn.Flatten(0, 1)
)
initialize(model)

# The nn package also contains definitions of popular loss functions; in this
# case we will use Mean Squared Error (MSE) as our loss function.
loss_fn = torch.nn.MSELoss(reduction='sum')

learning_rate = 1e-6
for t in range(n_steps):

    # Forward pass: compute predicted y by passing x to the model. Module objects
    # override the __call__ operator so you can call them like functions. When
    # doing so you pass a Tensor of input data to the Module and it produces
    # a Tensor of output data.
    y_pred = model(xx)

    # Compute and print loss. We pass Tensors containing the predicted and true
    # values of y, and the loss function returns a Tensor containing the
    # loss.
    loss = loss_fn(y_pred, y)
    if t % 100 == 99:
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

# You can access the first layer of `model` like accessing the first item of a list
linear_layer = model[0]

# For linear layer, its parameters are stored as `weight` and `bias`.
print(f'Result: y = {linear_layer.bias.item()} + {linear_layer.weight[:, 0].item()} x + {linear_layer.weight[:, 1].item()} x^2 + {linear_layer.weight[:, 2].item()} x^3')
record.append(params_of(model))
record.append([list(xx.shape), xx.dtype == torch.float32, list(y_pred.shape)])
"""

NN_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("param -= learning_rate * param.grad\n", "param -= learning_rate * param.grad(grads)\n"),
]

OPTIM_SOURCE = """
import torch
import math


# Create Tensors to hold input and outputs.
x = torch.linspace(-math.pi, math.pi, 2000)
y = torch.sin(x)

# Prepare the input tensor (x, x^2, x^3).
p = torch.tensor([1, 2, 3])
xx = x.unsqueeze(-1).pow(p)

# Use the nn package to define our model and loss function.
model = torch.nn.Sequential(
    torch.nn.Linear(3, 1),
    torch.nn.Flatten(0, 1)
)
initialize(model)
loss_fn = torch.nn.MSELoss(reduction='sum')

# Use the optim package to define an Optimizer that will update the weights of
# the model for us. Here we will use RMSprop; the optim package contains many other
# optimization algorithms. The first argument to the RMSprop constructor tells the
# optimizer which Tensors it should update.
learning_rate = 1e-3
optimizer = torch.optim.RMSprop(model.parameters(), lr=learning_rate)
for t in range(n_steps):
    # Forward pass: compute predicted y by passing x to the model.
    y_pred = model(xx)

    # Compute and print loss.
    loss = loss_fn(y_pred, y)
    if t % 100 == 99:
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


linear_layer = model[0]
print(f'Result: y = {linear_layer.bias.item()} + {linear_layer.weight[:, 0].item()} x + {linear_layer.weight[:, 1].item()} x^2 + {linear_layer.weight[:, 2].item()} x^3')
record.append(params_of(model))
record.append(sorted(optimizer.state_dict()["state"][0]))
"""

OPTIM_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
]


@pytest.mark.parametrize("which", ["nn", "optim"])
def test_polynomial_nn_and_optim_train_the_sequential_as_torch(capsys, which):
    source, steps = (NN_SOURCE, NN_STEPS) if which == "nn" else (OPTIM_SOURCE, OPTIM_STEPS)
    (theirs, ours), _ = runs_with_draws(
        source, steps, capsys, 26104, n_steps=300, initialize=initializer(), params_of=params_of
    )
    assert len(theirs) == 5
    assert theirs[2] < theirs[0]
    assert_records_agree(ours[:-1], theirs[:-1], rtol=1e-4, atol=1e-5)
    assert ours[-1] == theirs[-1]


# -- examples_nn/polynomial_module.py and dynamic_net.py -----------------------------------------
MODULE_SOURCE = """
import torch
import math


class Polynomial3(torch.nn.Module):
    def __init__(self):
        \"\"\"
        In the constructor we instantiate four parameters and assign them as
        member parameters.
        \"\"\"
        super().__init__()
        self.a = torch.nn.Parameter(torch.randn(()))
        self.b = torch.nn.Parameter(torch.randn(()))
        self.c = torch.nn.Parameter(torch.randn(()))
        self.d = torch.nn.Parameter(torch.randn(()))

    def forward(self, x):
        \"\"\"
        In the forward function we accept a Tensor of input data and we must return
        a Tensor of output data. We can use Modules defined in the constructor as
        well as arbitrary operators on Tensors.
        \"\"\"
        return self.a + self.b * x + self.c * x ** 2 + self.d * x ** 3

    def string(self):
        \"\"\"
        Just like any class in Python, you can also define custom method on PyTorch modules
        \"\"\"
        return f'y = {self.a.item()} + {self.b.item()} x + {self.c.item()} x^2 + {self.d.item()} x^3'


# Create Tensors to hold input and outputs.
x = torch.linspace(-math.pi, math.pi, 2000)
y = torch.sin(x)

# Construct our model by instantiating the class defined above
model = Polynomial3()

# Construct our loss function and an Optimizer. The call to model.parameters()
# in the SGD constructor will contain the learnable parameters (defined
# with torch.nn.Parameter) which are members of the model.
criterion = torch.nn.MSELoss(reduction='sum')
optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
for t in range(n_steps):
    # Forward pass: Compute predicted y by passing x to the model
    y_pred = model(x)

    # Compute and print loss
    loss = criterion(y_pred, y)
    if t % 100 == 99:
        print(t, loss.item())
        record.append(loss.item())

    # Zero gradients, perform a backward pass, and update the weights.
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

print(f'Result: {model.string()}')
record.append(params_of(model))
record.append([name for name, _ in model.named_parameters()])
record.append(list(model.state_dict()))
"""

DYNAMIC_SOURCE = """
import random
import torch
import math


class DynamicNet(torch.nn.Module):
    def __init__(self):
        \"\"\"
        In the constructor we instantiate five parameters and assign them as members.
        \"\"\"
        super().__init__()
        self.a = torch.nn.Parameter(torch.randn(()))
        self.b = torch.nn.Parameter(torch.randn(()))
        self.c = torch.nn.Parameter(torch.randn(()))
        self.d = torch.nn.Parameter(torch.randn(()))
        self.e = torch.nn.Parameter(torch.randn(()))

    def forward(self, x):
        \"\"\"
        For the forward pass of the model, we randomly choose either 4, 5
        and reuse the e parameter to compute the contribution of these orders.

        Since each forward pass builds a dynamic computation graph, we can use normal
        Python control-flow operators like loops or conditional statements when
        defining the forward pass of the model.

        Here we also see that it is perfectly safe to reuse the same parameter many
        times when defining a computational graph.
        \"\"\"
        y = self.a + self.b * x + self.c * x ** 2 + self.d * x ** 3
        for exp in range(4, random.randint(4, 6)):
            y = y + self.e * x ** exp
        return y

    def string(self):
        \"\"\"
        Just like any class in Python, you can also define custom method on PyTorch modules
        \"\"\"
        return f'y = {self.a.item()} + {self.b.item()} x + {self.c.item()} x^2 + {self.d.item()} x^3 + {self.e.item()} x^4 ? + {self.e.item()} x^5 ?'


# Create Tensors to hold input and outputs.
x = torch.linspace(-math.pi, math.pi, 2000)
y = torch.sin(x)

# Construct our model by instantiating the class defined above
model = DynamicNet()

# Construct our loss function and an Optimizer. Training this strange model with
# vanilla stochastic gradient descent is tough, so we use momentum
criterion = torch.nn.MSELoss(reduction='sum')
optimizer = torch.optim.SGD(model.parameters(), lr=1e-8, momentum=0.9)
for t in range(n_steps):
    # Forward pass: Compute predicted y by passing x to the model
    y_pred = model(x)

    # Compute and print loss
    loss = criterion(y_pred, y)
    if t % 2000 == 1999:
        print(t, loss.item())
    if t % 100 == 99:
        record.append(loss.item())

    # Zero gradients, perform a backward pass, and update the weights.
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

print(f'Result: {model.string()}')
record.append(params_of(model))
"""

MODULE_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
]


def test_polynomial_module_and_dynamic_net_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        MODULE_SOURCE, MODULE_STEPS, capsys, 26105, n_steps=300, params_of=params_of
    )
    assert len(theirs) == 6
    assert theirs[-1] == theirs[-2] == ["a", "b", "c", "d"]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)

    (theirs, ours), _ = runs_with_draws(
        DYNAMIC_SOURCE, MODULE_STEPS, capsys, 26106, n_steps=400, params_of=params_of
    )
    assert len(theirs) == 5
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
