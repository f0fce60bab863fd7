# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
the learning-rate range test as davidtvs/pytorch-lr-finder writes it
(``torch_lr_finder/lr_finder.py``, its long docstrings shortened), run as its README's
examples run it, against torch's run of the same code from the same weights and batches.

- ``LRFinder``: the ``StateCacher`` of the model's and the optimizer's ``state_dict()`` kept in
  memory by ``copy.deepcopy`` or on disk by ``torch.save`` into ``cache_dir`` and read back by
  ``torch.load(fn, map_location=lambda storage, location: storage)``, ``reset()`` loading both
  back; ``_check_for_scheduler`` (an ``initial_lr`` in a param group); ``range_test`` with its
  own ``_LRScheduler`` subclasses ``LinearLR``/``ExponentialLR`` (``get_lr`` from
  ``self.last_epoch`` and ``self.base_lrs``, read by ``lr_schedule.get_lr()[0]``), the smoothed
  loss and the divergence stop, ``start_lr`` through ``_set_learning_rate``;
- ``_train_batch``'s gradient accumulation (``loss /= accumulation_steps`` in place, ``total_loss
  += loss``), the ``torch.amp`` path (``torch.amp.autocast(**amp_config)``,
  ``grad_scaler.scale(loss).backward()``, ``grad_scaler.step``/``update``) with a disabled
  ``GradScaler`` on the CPU; ``_validate`` under ``torch.no_grad()`` through
  ``ValDataLoaderIter``; ``TrainDataLoaderIter``'s restart of an exhausted ``DataLoader``;
  ``_move_to_device``'s ``obj.to(device, non_blocking=...)``; ``plot``'s steepest-gradient
  suggestion (``np.gradient``) drawn on a given axes.

What stands in: MNIST-shaped random images with random labels (no shuffling: each library's
sampler would draw its own order), matplotlib's axes by a recorder, tqdm's bar by the iterable.
The port changes the import lines, the ``torch.__version__`` gate (retrograd's version is its
own) and the gradient lines (each micro-batch's gradients summed, then given to ``step``).
"""

from __future__ import annotations

import random

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

LR_FINDER_SOURCE = '''
import copy
import os
import torch
import numpy as np
from torch.optim.lr_scheduler import _LRScheduler
from torch.utils.data import DataLoader

from packaging import version

PYTORCH_VERSION = version.parse(torch.__version__)

# Check available backends for mixed precision training
AVAILABLE_AMP_BACKENDS = []
try:
    import apex.amp
    AVAILABLE_AMP_BACKENDS.append("apex")
except ImportError:
    pass

try:
    import torch.amp
    AVAILABLE_AMP_BACKENDS.append("torch")
except ImportError:
    pass


class DataLoaderIter(object):
    def __init__(self, data_loader):
        self.data_loader = data_loader
        self._iterator = iter(data_loader)

    @property
    def dataset(self):
        return self.data_loader.dataset

    def inputs_labels_from_batch(self, batch_data):
        if not isinstance(batch_data, list) and not isinstance(batch_data, tuple):
            raise ValueError(
                "Your batch type is not supported: {}. Please inherit from "
                "`TrainDataLoaderIter` or `ValDataLoaderIter` and override the "
                "`inputs_labels_from_batch` method.".format(type(batch_data))
            )

        inputs, labels, *_ = batch_data

        return inputs, labels

    def __iter__(self):
        return self

    def __next__(self):
        batch = next(self._iterator)
        return self.inputs_labels_from_batch(batch)


class TrainDataLoaderIter(DataLoaderIter):
    def __init__(self, data_loader, auto_reset=True):
        super().__init__(data_loader)
        self.auto_reset = auto_reset

    def __next__(self):
        try:
            batch = next(self._iterator)
            inputs, labels = self.inputs_labels_from_batch(batch)
        except StopIteration:
            if not self.auto_reset:
                raise
            self._iterator = iter(self.data_loader)
            batch = next(self._iterator)
            inputs, labels = self.inputs_labels_from_batch(batch)

        return inputs, labels


class ValDataLoaderIter(DataLoaderIter):
    """This iterator will reset itself **only** when it is acquired by
    the syntax of normal `iterator`. That is, this iterator just works
    like a `torch.data.DataLoader`.
    """

    def __init__(self, data_loader):
        super().__init__(data_loader)
        self.run_limit = len(self.data_loader)
        self.run_counter = 0

    def __iter__(self):
        if self.run_counter >= self.run_limit:
            self._iterator = iter(self.data_loader)
            self.run_counter = 0
        return self

    def __next__(self):
        self.run_counter += 1
        return super(ValDataLoaderIter, self).__next__()


class LRFinder(object):
    """Learning rate range test.

    Example:
        >>> lr_finder = LRFinder(net, optimizer, criterion, device="cuda")
        >>> lr_finder.range_test(dataloader, end_lr=100, num_iter=100)
        >>> lr_finder.plot() # to inspect the loss-learning rate graph
        >>> lr_finder.reset() # to reset the model and optimizer to their initial state
    """

    def __init__(
        self,
        model,
        optimizer,
        criterion,
        device=None,
        memory_cache=True,
        cache_dir=None,
        amp_backend=None,
        amp_config=None,
        grad_scaler=None,
    ):
        # Check if the optimizer is already attached to a scheduler
        self.optimizer = optimizer
        self._check_for_scheduler()

        self.model = model
        self.criterion = criterion
        self.history = {"lr": [], "loss": []}
        self.best_loss = None
        self.memory_cache = memory_cache
        self.cache_dir = cache_dir

        # Settings related to mixed precision training
        if amp_backend and (amp_backend not in AVAILABLE_AMP_BACKENDS):
            raise ValueError(f"Unknown amp backend: {amp_backend}")

        if amp_backend == "torch":
            if grad_scaler is None:
                raise ValueError(f"`grad_scaler` is required when using `torch.amp`")

        self.amp_backend = amp_backend
        self.amp_config = amp_config
        self.grad_scaler = grad_scaler

        # Save the original state of the model and optimizer so they can be restored if
        # needed
        self.model_device = next(self.model.parameters()).device
        self.state_cacher = StateCacher(memory_cache, cache_dir=cache_dir)
        self.state_cacher.store("model", self.model.state_dict())
        self.state_cacher.store("optimizer", self.optimizer.state_dict())

        # If device is None, use the same as the model
        if device:
            self.device = device
        else:
            self.device = self.model_device

    def reset(self):
        """Restores the model and optimizer to their initial states."""

        self.model.load_state_dict(self.state_cacher.retrieve("model"))
        self.optimizer.load_state_dict(self.state_cacher.retrieve("optimizer"))
        self.model.to(self.model_device)

    def range_test(
        self,
        train_loader,
        val_loader=None,
        start_lr=None,
        end_lr=10,
        num_iter=100,
        step_mode="exp",
        smooth_f=0.05,
        diverge_th=5,
        accumulation_steps=1,
        non_blocking_transfer=True,
    ):
        """Performs the learning rate range test."""

        # Reset test results
        self.history = {"lr": [], "loss": []}
        self.best_loss = None

        # Move the model to the proper device
        self.model.to(self.device)

        # Check if the optimizer is already attached to a scheduler
        self._check_for_scheduler()

        # Set the starting learning rate
        if start_lr:
            self._set_learning_rate(start_lr)

        # Initialize the proper learning rate policy
        if step_mode.lower() == "exp":
            lr_schedule = ExponentialLR(self.optimizer, end_lr, num_iter)
        elif step_mode.lower() == "linear":
            lr_schedule = LinearLR(self.optimizer, end_lr, num_iter)
        else:
            raise ValueError("expected one of (exp, linear), got {}".format(step_mode))

        if smooth_f < 0 or smooth_f >= 1:
            raise ValueError("smooth_f is outside the range [0, 1[")

        # Create an iterator to get data batch by batch
        if isinstance(train_loader, DataLoader):
            train_iter = TrainDataLoaderIter(train_loader)
        elif isinstance(train_loader, TrainDataLoaderIter):
            train_iter = train_loader
        else:
            raise ValueError(
                "`train_loader` has unsupported type: {}."
                "Expected types are `torch.utils.data.DataLoader`"
                "or child of `TrainDataLoaderIter`.".format(type(train_loader))
            )

        if val_loader:
            if isinstance(val_loader, DataLoader):
                val_iter = ValDataLoaderIter(val_loader)
            elif isinstance(val_loader, ValDataLoaderIter):
                val_iter = val_loader
            else:
                raise ValueError(
                    "`val_loader` has unsupported type: {}."
                    "Expected types are `torch.utils.data.DataLoader`"
                    "or child of `ValDataLoaderIter`.".format(type(val_loader))
                )

        for iteration in tqdm(range(num_iter)):
            # Train on batch and retrieve loss
            loss = self._train_batch(
                train_iter,
                accumulation_steps,
                non_blocking_transfer=non_blocking_transfer,
            )
            if val_loader:
                loss = self._validate(
                    val_iter, non_blocking_transfer=non_blocking_transfer
                )

            # Update the learning rate
            self.history["lr"].append(lr_schedule.get_lr()[0])
            lr_schedule.step()

            # Track the best loss and smooth it if smooth_f is specified
            if iteration == 0:
                self.best_loss = loss
            else:
                if smooth_f > 0:
                    loss = smooth_f * loss + (1 - smooth_f) * self.history["loss"][-1]
                if loss < self.best_loss:
                    self.best_loss = loss

            # Check if the loss has diverged; if it has, stop the test
            self.history["loss"].append(loss)
            if loss > diverge_th * self.best_loss:
                print("Stopping early, the loss has diverged")
                break

        print("Learning rate search finished. See the graph with {finder_name}.plot()")

    def _set_learning_rate(self, new_lrs):
        if not isinstance(new_lrs, list):
            new_lrs = [new_lrs] * len(self.optimizer.param_groups)
        if len(new_lrs) != len(self.optimizer.param_groups):
            raise ValueError(
                "Length of `new_lrs` is not equal to the number of parameter groups "
                + "in the given optimizer"
            )

        for param_group, new_lr in zip(self.optimizer.param_groups, new_lrs):
            param_group["lr"] = new_lr

    def _check_for_scheduler(self):
        for param_group in self.optimizer.param_groups:
            if "initial_lr" in param_group:
                raise RuntimeError("Optimizer already has a scheduler attached to it")

    def _train_batch(self, train_iter, accumulation_steps, non_blocking_transfer=True):
        self.model.train()
        total_loss = None  # for late initialization

        self.optimizer.zero_grad()
        for i in range(accumulation_steps):
            inputs, labels = next(train_iter)
            inputs, labels = self._move_to_device(
                inputs, labels, non_blocking=non_blocking_transfer
            )

            # Forward pass
            if self.amp_backend == "torch":
                with torch.amp.autocast(**self.amp_config):
                    outputs = self.model(inputs)
                    loss = self.criterion(outputs, labels)
            else:
                outputs = self.model(inputs)
                loss = self.criterion(outputs, labels)

            # Loss should be averaged in each step
            loss /= accumulation_steps

            # Backward pass
            if self.amp_backend == "torch":
                self.grad_scaler.scale(loss).backward()
            elif self.amp_backend == "apex" and hasattr(self.optimizer, "_amp_stash"):
                with apex.amp.scale_loss(loss, self.optimizer) as scaled_loss:
                    scaled_loss.backward()
            else:
                loss.backward()

            if total_loss is None:
                total_loss = loss
            else:
                total_loss += loss

        if self.amp_backend == "torch":
            self.grad_scaler.step(self.optimizer)
            self.grad_scaler.update()
        else:
            self.optimizer.step()

        return total_loss.item()

    def _move_to_device(self, inputs, labels, non_blocking=True):
        def move(obj, device, non_blocking=True):
            if hasattr(obj, "to"):
                return obj.to(device, non_blocking=non_blocking)
            elif isinstance(obj, tuple):
                return tuple(move(o, device, non_blocking) for o in obj)
            elif isinstance(obj, list):
                return [move(o, device, non_blocking) for o in obj]
            elif isinstance(obj, dict):
                return {k: move(o, device, non_blocking) for k, o in obj.items()}
            else:
                return obj

        inputs = move(inputs, self.device, non_blocking=non_blocking)
        labels = move(labels, self.device, non_blocking=non_blocking)
        return inputs, labels

    def _validate(self, val_iter, non_blocking_transfer=True):
        # Set model to evaluation mode and disable gradient computation
        running_loss = 0
        self.model.eval()
        with torch.no_grad():
            for inputs, labels in val_iter:
                # Move data to the correct device
                inputs, labels = self._move_to_device(
                    inputs, labels, non_blocking=non_blocking_transfer
                )

                # Forward pass and loss computation
                outputs = self.model(inputs)
                loss = self.criterion(outputs, labels)
                running_loss += loss.item() * len(labels)

        return running_loss / len(val_iter.dataset)

    def plot(
        self,
        skip_start=10,
        skip_end=5,
        log_lr=True,
        show_lr=None,
        ax=None,
        suggest_lr=True,
    ):
        """Plots the learning rate range test."""

        if skip_start < 0:
            raise ValueError("skip_start cannot be negative")
        if skip_end < 0:
            raise ValueError("skip_end cannot be negative")
        if show_lr is not None and not isinstance(show_lr, float):
            raise ValueError("show_lr must be float")

        # Get the data to plot from the history dictionary. Also, handle skip_end=0
        # properly so the behaviour is the expected
        lrs = self.history["lr"]
        losses = self.history["loss"]
        if skip_end == 0:
            lrs = lrs[skip_start:]
            losses = losses[skip_start:]
        else:
            lrs = lrs[skip_start:-skip_end]
            losses = losses[skip_start:-skip_end]

        # Create the figure and axes object if axes was not already given
        fig = None
        if ax is None:
            fig, ax = plt.subplots()

        # Plot loss as a function of the learning rate
        ax.plot(lrs, losses)

        # Plot the suggested LR
        if suggest_lr:
            # 'steepest': the point with steepest gradient (minimal gradient)
            print("LR suggestion: steepest gradient")
            min_grad_idx = None
            try:
                min_grad_idx = (np.gradient(np.array(losses))).argmin()
            except ValueError:
                print(
                    "Failed to compute the gradients, there might not be enough points."
                )
            if min_grad_idx is not None:
                print("Suggested LR: {:.2E}".format(lrs[min_grad_idx]))
                ax.scatter(
                    lrs[min_grad_idx],
                    losses[min_grad_idx],
                    s=75,
                    marker="o",
                    color="red",
                    zorder=3,
                    label="steepest gradient",
                )
                ax.legend()

        if log_lr:
            ax.set_xscale("log")
        ax.set_xlabel("Learning rate")
        ax.set_ylabel("Loss")

        if show_lr is not None:
            ax.axvline(x=show_lr, color="red")

        # Show only if the figure was created internally
        if fig is not None:
            plt.show()

        if suggest_lr and min_grad_idx is not None:
            return ax, lrs[min_grad_idx]
        else:
            return ax


class LinearLR(_LRScheduler):
    """Linearly increases the learning rate between two boundaries over a number of
    iterations.
    """

    def __init__(self, optimizer, end_lr, num_iter, last_epoch=-1):
        self.end_lr = end_lr

        if num_iter <= 1:
            raise ValueError("`num_iter` must be larger than 1")
        self.num_iter = num_iter

        super(LinearLR, self).__init__(optimizer, last_epoch)

    def get_lr(self):
        # In earlier Pytorch versions last_epoch starts at -1, while in recent versions
        # it starts at 0. We need to adjust the math a bit to handle this. See
        # discussion at: https://github.com/davidtvs/pytorch-lr-finder/pull/42
        if PYTORCH_VERSION < version.parse("1.1.0"):
            curr_iter = self.last_epoch + 1
            r = curr_iter / (self.num_iter - 1)
        else:
            r = self.last_epoch / (self.num_iter - 1)

        return [base_lr + r * (self.end_lr - base_lr) for base_lr in self.base_lrs]


class ExponentialLR(_LRScheduler):
    """Exponentially increases the learning rate between two boundaries over a number of
    iterations.
    """

    def __init__(self, optimizer, end_lr, num_iter, last_epoch=-1):
        self.end_lr = end_lr

        if num_iter <= 1:
            raise ValueError("`num_iter` must be larger than 1")
        self.num_iter = num_iter

        super(ExponentialLR, self).__init__(optimizer, last_epoch)

    def get_lr(self):
        # In earlier Pytorch versions last_epoch starts at -1, while in recent versions
        # it starts at 0. We need to adjust the math a bit to handle this. See
        # discussion at: https://github.com/davidtvs/pytorch-lr-finder/pull/42
        if PYTORCH_VERSION < version.parse("1.1.0"):
            curr_iter = self.last_epoch + 1
            r = curr_iter / (self.num_iter - 1)
        else:
            r = self.last_epoch / (self.num_iter - 1)

        return [base_lr * (self.end_lr / base_lr) ** r for base_lr in self.base_lrs]


class StateCacher(object):
    def __init__(self, in_memory, cache_dir=None):
        self.in_memory = in_memory
        self.cache_dir = cache_dir

        if self.cache_dir is None:
            import tempfile

            self.cache_dir = tempfile.gettempdir()
        else:
            if not os.path.isdir(self.cache_dir):
                raise ValueError("Given `cache_dir` is not a valid directory.")

        self.cached = {}

    def store(self, key, state_dict):
        if self.in_memory:
            self.cached.update({key: copy.deepcopy(state_dict)})
        else:
            fn = os.path.join(self.cache_dir, "state_{}_{}.pt".format(key, id(self)))
            self.cached.update({key: fn})
            torch.save(state_dict, fn)

    def retrieve(self, key):
        if key not in self.cached:
            raise KeyError("Target {} was not cached.".format(key))

        if self.in_memory:
            return self.cached.get(key)
        else:
            fn = self.cached.get(key)
            if not os.path.exists(fn):
                raise RuntimeError(
                    "Failed to load state in {}. File doesn't exist anymore.".format(fn)
                )
            state_dict = torch.load(fn, map_location=lambda storage, location: storage)
            return state_dict

    def __del__(self):
        """Check whether there are unused cached files existing in `cache_dir` before
        this instance being destroyed."""

        if self.in_memory:
            return

        for k in self.cached:
            if os.path.exists(self.cached[k]):
                os.remove(self.cached[k])


# -- the README's examples, on MNIST-shaped random images --------------------------------------
import torch.nn as nn
import torch.optim as optim


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, stride=2, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 6 * 6, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(x.flatten(1))


train_set = torch.utils.data.TensorDataset(torch.randn(12, 1, 14, 14), torch.randint(0, 10, (12,)))
val_set = torch.utils.data.TensorDataset(torch.randn(6, 1, 14, 14), torch.randint(0, 10, (6,)))
trainloader = DataLoader(train_set, batch_size=4)
val_loader = DataLoader(val_set, batch_size=3)

model = Net()
initialize(model)
# fastai's approach, the model and the optimizer cached in memory
criterion = nn.CrossEntropyLoss()
optimizer = optim.Adam(model.parameters(), lr=1e-7, weight_decay=1e-2)
lr_finder = LRFinder(model, optimizer, criterion, device="cpu")
lr_finder.range_test(trainloader, end_lr=100, num_iter=16)
record.append(lr_finder.history["lr"])
record.append(lr_finder.history["loss"])
record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
ax = Axes()
_, suggested_lr = lr_finder.plot(ax=ax, skip_start=2, skip_end=1)
record.append(suggested_lr)
record.append(ax.calls)
lr_finder.reset() # to reset the model and optimizer to their initial state
record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})

# Leslie Smith's approach, cached on disk
optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
lr_finder = LRFinder(model, optimizer, criterion, device="cpu", memory_cache=False, cache_dir=cache_dir)
lr_finder.range_test(trainloader, val_loader=val_loader, end_lr=1, num_iter=5, step_mode="linear")
record.append(lr_finder.history["lr"])
record.append(lr_finder.history["loss"])
record.append(sorted(os.listdir(cache_dir)) == ["state_model_{}.pt".format(id(lr_finder.state_cacher)), "state_optimizer_{}.pt".format(id(lr_finder.state_cacher))])
lr_finder.reset()
record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})

# gradient accumulation: 8 images a step, in micro-batches of 4, through torch.amp (disabled)
desired_bs, real_bs = 8, 4
accumulation_steps = desired_bs // real_bs
optimizer = optim.AdamW(model.parameters(), lr=1e-3)
acc_lr_finder = LRFinder(model, optimizer, criterion, device="cpu", amp_backend="torch",
                         amp_config={"device_type": "cpu", "enabled": False},
                         grad_scaler=torch.amp.GradScaler("cpu", enabled=False))
acc_lr_finder.range_test(trainloader, start_lr=1e-4, end_lr=10, num_iter=4, accumulation_steps=accumulation_steps)
record.append(acc_lr_finder.history["lr"])
record.append(acc_lr_finder.history["loss"])
record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
'''

LR_FINDER_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    import torch.amp\n", "    import retrograd.amp\n"),
    (
        "import torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    (
        "PYTORCH_VERSION = version.parse(torch.__version__)",
        'PYTORCH_VERSION = version.parse("2.13.0")',
    ),
    (
        "        self.optimizer.zero_grad()\n",
        "        self.optimizer.zero_grad()\n        grads = None\n",
    ),
    (
        "                self.grad_scaler.scale(loss).backward()\n",
        "                g = self.grad_scaler.scale(loss).backward()\n"
        "                grads = g if grads is None else grads + g\n",
    ),
    (
        "            else:\n                loss.backward()\n",
        "            else:\n                g = loss.backward()\n"
        "                grads = g if grads is None else grads + g\n",
    ),
    (
        "            self.grad_scaler.step(self.optimizer)\n",
        "            self.grad_scaler.step(self.optimizer, grads)\n",
    ),
    (
        "        else:\n            self.optimizer.step()\n",
        "        else:\n            self.optimizer.step(grads)\n",
    ),
]


class _Axes:
    """A matplotlib ``Axes`` that records what is drawn on it (the calls and their keywords: the
    drawn values are the history, recorded apart)."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def draw(*args, **kwargs):
            self.calls.append(f"{name}{sorted(kwargs.items())!r}")

        return draw


def _tqdm(iterable):
    return iterable


def test_lr_finder_range_tests_and_resets_as_torch(capsys, tmp_path):
    """The exponential test with a divergence stop, the linear test against a validation set
    with the state cached on disk, and the accumulated test through a disabled GradScaler:
    each history, the suggested rate, what is drawn, and the weights after each test and each
    ``reset`` agree with torch's."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    initialize = initializer()
    records, logs = [], []
    for lib in (torch, rg):
        text = LR_FINDER_SOURCE if lib is torch else port(LR_FINDER_SOURCE, LR_FINDER_STEPS)
        text = text.replace("from torch.", "from retrograd.") if lib is rg else text
        cache_dir = tmp_path / lib.__name__
        cache_dir.mkdir()
        record = []
        # float64: the exponential test runs Adam up to lr=100 until the loss diverges, which
        # magnifies float32 rounding (CI saw weights 2e-4 apart after it, the order of a sum)
        lib.set_default_dtype(lib.float64)
        try:
            with SharedDraws(lib, 43101):
                run_source(
                    text, lib, record=record, initialize=initialize, Axes=_Axes, tqdm=_tqdm,
                    cache_dir=str(cache_dir),
                )  # fmt: skip
        finally:
            lib.set_default_dtype(lib.float32)
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert "Stopping early, the loss has diverged" in logs[0]
    assert logs[1] == logs[0]
    assert theirs[8] is True
    assert_records_agree(ours, theirs, rtol=1e-7, atol=1e-9)
