"""``isinstance`` answers as torch's: for every pair of classes that torch 2.13 and retrograd
both have under one name (``nn`` layers and their private bases, losses, optimizers,
schedules, distributions, data utilities), one is a subclass of the other in retrograd exactly
when it is in torch. Training code branches on them (``isinstance(m, nn.Dropout)`` to switch
dropout off, ``isinstance(m, nn.MaxPool2d)`` in model surgery, ``isinstance(s, LRScheduler)``
to choose how to step), so a ``LogSoftmax`` that is a ``Softmax``, or a ``MaxPool1d`` that is a
``MaxPool2d``, takes the other branch."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.modules.batchnorm
import torch.nn.modules.conv
import torch.nn.modules.dropout
import torch.nn.modules.instancenorm
import torch.nn.modules.loss
import torch.nn.modules.pooling

import retrograd as rg
import retrograd.nn.modules.batchnorm
import retrograd.nn.modules.conv
import retrograd.nn.modules.dropout
import retrograd.nn.modules.instancenorm
import retrograd.nn.modules.loss
import retrograd.nn.modules.pooling

NAMESPACES = [
    ("nn", torch.nn, rg.nn),
    ("nn", torch.nn.modules.batchnorm, retrograd.nn.modules.batchnorm),
    ("nn", torch.nn.modules.conv, retrograd.nn.modules.conv),
    ("nn", torch.nn.modules.dropout, retrograd.nn.modules.dropout),
    ("nn", torch.nn.modules.instancenorm, retrograd.nn.modules.instancenorm),
    ("nn", torch.nn.modules.loss, retrograd.nn.modules.loss),
    ("nn", torch.nn.modules.pooling, retrograd.nn.modules.pooling),
    ("optim", torch.optim, rg.optim),
    ("lr_scheduler", torch.optim.lr_scheduler, rg.optim.lr_scheduler),
    ("distributions", torch.distributions, rg.distributions),
    ("data", torch.utils.data, rg.utils.data),
]

#: pairs whose relation differs from torch's on purpose (none left: the distributions torch
#: writes as exponential families or transformed distributions are subclasses of those here)
KNOWN: set[tuple[str, str]] = set()


def _shared_classes() -> dict[str, tuple[type, type]]:
    shared = {}
    for prefix, theirs, ours in NAMESPACES:
        for name in dir(theirs):
            t, r = getattr(theirs, name), getattr(ours, name, None)
            if inspect.isclass(t) and inspect.isclass(r):
                shared[f"{prefix}.{name}"] = (t, r)
    return shared


SHARED = _shared_classes()

#: Tests that compare classes (``issubclass``), not instances: no tensor, on any backend.
only_classes = pytest.mark.backend_independent("compares the classes, makes no instance")


@only_classes
def test_enough_classes_are_compared():
    assert len(SHARED) > 250


@only_classes
@pytest.mark.parametrize("name", sorted(SHARED))
def test_subclass_relations_match_torch(name):
    theirs, ours = SHARED[name]
    different = []
    for other, (their_other, our_other) in SHARED.items():
        if other == name or their_other is theirs or our_other is ours:
            continue  # an alias of the same class
        related = issubclass(theirs, their_other)
        if related != issubclass(ours, our_other) and (name, other) not in KNOWN:
            different.append(f"{other} (torch: {related})")
    assert not different, f"{name} is a subclass of these in one library only: {different}"


@pytest.mark.parametrize(
    ("make", "cls", "expected"),
    [
        (lambda nn: nn.Dropout2d(), "Dropout", False),
        (lambda nn: nn.ConvTranspose1d(1, 1, 1), "ConvTranspose2d", False),
        (lambda nn: nn.MaxPool1d(2), "MaxPool2d", False),
        (lambda nn: nn.LogSoftmax(1), "Softmax", False),
        (lambda nn: nn.ReLU6(), "Hardtanh", True),
        (lambda nn: nn.ZeroPad2d(1), "ConstantPad2d", True),
        (lambda nn: nn.LazyLinear(2), "Linear", True),
    ],
)
def test_instances_answer_as_torchs(make, cls, expected):
    assert isinstance(make(torch.nn), getattr(torch.nn, cls)) is expected
    assert isinstance(make(rg.nn), getattr(rg.nn, cls)) is expected


def test_relu6_zero_pad_and_lazy_linear_keep_working_as_their_parents():
    x = rg.tensor([[-1.0, 3.0, 7.0]])
    six = rg.nn.ReLU6()
    assert (six.min_val, six.max_val) == (0.0, 6.0)
    assert six(x).tolist() == [[0.0, 3.0, 6.0]] and repr(six) == repr(torch.nn.ReLU6())
    pad = rg.nn.ZeroPad2d(1)
    assert pad(rg.ones((1, 1, 1))).shape == (1, 3, 3) and repr(pad) == repr(torch.nn.ZeroPad2d(1))
    lazy = rg.nn.LazyLinear(2)
    assert lazy(rg.ones((4, 3))).shape == (4, 2) and type(lazy) is rg.nn.Linear


ARGUMENTS = [(), (4,), (4, 4), (4, 4, 3), (2, 4, 4), (4, 2)]
#: the layers none of those fit: their arguments, made in the library at hand
SPECIAL = {
    "AdaptiveLogSoftmaxWithLoss": lambda nn: (8, 10, [4, 7]),
    "RNNBase": lambda nn: ("LSTM", 4, 4),
    "RNNCellBase": lambda nn: (4, 4, True, 4),
    "TransformerEncoder": lambda nn: (nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0), 2),
    "TransformerDecoder": lambda nn: (nn.TransformerDecoderLayer(4, 2, 8, dropout=0.0), 2),
    "Unflatten": lambda nn: (1, (2, 2)),
}
MODULES = sorted(
    name
    for name in dir(torch.nn)
    if inspect.isclass(getattr(torch.nn, name))
    and issubclass(getattr(torch.nn, name), torch.nn.Module)
    and inspect.isclass(getattr(rg.nn, name, None))
    and name not in ("DataParallel",)  # torch's wraps anything; ours refuses a non-module
)


#: public attributes of torch's layers that are flags of its fused fast paths (nested tensors,
#: the native transformer kernel), which retrograd has none of
FAST_PATH_FLAGS = {"use_nested_tensor", "activation_relu_or_gelu"}
SIMPLE = (int, float, bool, str, tuple, type(None))


@pytest.mark.parametrize("name", MODULES)
def test_modules_print_and_hold_state_as_torchs(name):
    """Each layer built from the first argument list torch's constructor takes prints as
    torch's, holds torch's state-dict keys and shapes (``TripletMarginWithDistanceLoss`` held
    no ``PairwiseDistance`` child) and torch's public attributes of plain values
    (``AvgPool1d(4).kernel_size`` is torch's ``(4,)``, it was ``4``)."""
    special = SPECIAL.get(name)
    for arguments in [special] if special else ARGUMENTS:
        try:
            theirs = getattr(torch.nn, name)(*(special(torch.nn) if special else arguments))
        except Exception:  # torch's constructor decides which list fits
            continue
        ours = getattr(rg.nn, name)(*(special(rg.nn) if special else arguments))
        assert repr(ours) == repr(theirs)
        attributes = {
            key: value
            for key, value in vars(theirs).items()
            if not key.startswith("_") and key != "training" and isinstance(value, SIMPLE)
        }
        for key in attributes.keys() - FAST_PATH_FLAGS:
            assert getattr(ours, key) == attributes[key], key
        if not name.startswith("Lazy"):  # torch's uninitialized parameters have no shape
            shapes = {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
            assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == shapes
        return
    pytest.fail(f"torch's {name} takes none of {ARGUMENTS}: give it arguments here")
