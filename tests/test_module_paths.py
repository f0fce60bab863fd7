"""torch's module paths that real scripts import from, against torch 2.13: every path of
``module_paths.PATHS`` is one of torch's and gives torch's names as retrograd's own objects,
the import lines of real code (counted from public repositories: DCN's ``once_differentiable``,
``_pair`` in layer code, ``import torch.backends.cudnn as cudnn``, timm's
``_no_grad_trunc_normal_``...) run, and the names with meaning of their own (``_pair``,
``consume_prefix_in_state_dict_if_present``, ``once_differentiable``, ``RemovableHandle``'s
own form, ``_addindent``) behave as torch's."""

from __future__ import annotations

import importlib
import pathlib
import types
from collections import OrderedDict

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.errors import AutodiffError
from retrograd.module_paths import PATHS

SOURCE = pathlib.Path(rg.__file__).parent


@pytest.mark.parametrize("path", sorted(PATHS))
def test_each_path_is_torchs_and_gives_retrograds_objects(path):
    ours = importlib.import_module(f"retrograd.{path}")
    theirs = importlib.import_module(f"torch.{path}")
    # a path registered over a real file would hide it
    assert not (SOURCE / f"{path.replace('.', '/')}.py").exists()
    assert not (SOURCE / path.replace(".", "/")).is_dir()
    # torch's flag namespaces are module subclasses whose flags are the class's (properties,
    # descriptors): a name counts where both sides answer it
    listed = {*dir(theirs), *dir(type(theirs)), *getattr(theirs, "__all__", ()), *dir(ours)}
    shared = [
        name
        for name in sorted(listed)
        if not name.startswith("_") and hasattr(theirs, name) and hasattr(ours, name)
    ]
    assert shared, f"retrograd.{path} has none of torch's names"
    target = rg
    for part in PATHS[path].split("."):
        target = getattr(target, part)
    for name in shared if ours is not target else ():  # (a namespace registered itself)
        assert getattr(ours, name) is getattr(target, name)
    # the parent holds it as an imported submodule, as torch's does
    parent, _, leaf = f"retrograd.{path}".rpartition(".")
    assert getattr(importlib.import_module(parent), leaf) is not None


IMPORTS = [
    ("autograd.function", ["Function", "FunctionCtx", "once_differentiable"]),
    ("nn.modules.utils", ["_single", "_pair", "_triple", "_quadruple", "_ntuple"]),
    ("nn.modules.utils", ["consume_prefix_in_state_dict_if_present", "_reverse_repeat_tuple"]),
    ("nn.common_types", ["_size_1_t", "_size_2_t", "_size_any_t", "_ratio_2_t"]),
    ("nn.modules.batchnorm", ["_BatchNorm", "_NormBase"]),
    ("nn.modules.instancenorm", ["_InstanceNorm"]),
    ("nn.modules.conv", ["_ConvNd", "_ConvTransposeNd"]),
    ("nn.modules.loss", ["_Loss", "_WeightedLoss"]),
    ("nn.modules.dropout", ["_DropoutNd"]),
    ("nn.modules.transformer", ["_get_clones", "_get_activation_fn"]),
    ("nn.modules.module", ["_addindent"]),
    ("nn.init", ["_calculate_fan_in_and_fan_out", "_calculate_correct_fan"]),
    ("nn.init", ["_no_grad_uniform_", "_no_grad_normal_", "_no_grad_trunc_normal_"]),
    ("nn.utils.clip_grad", ["clip_grad_norm_", "clip_grad_value_"]),
    ("optim.adam", ["Adam"]),
    ("optim.sgd", ["SGD"]),
    ("distributions.normal", ["Normal"]),
    ("distributions.uniform", ["Uniform"]),
    ("distributions.independent", ["Independent"]),
    ("utils.hooks", ["RemovableHandle"]),
    ("utils.model_zoo", ["load_url"]),
    ("cuda.amp", ["custom_fwd", "custom_bwd", "autocast", "GradScaler"]),
    ("amp", ["custom_fwd", "custom_bwd"]),
    ("types", ["Number"]),
    ("random", ["fork_rng", "manual_seed", "get_rng_state"]),
]


@pytest.mark.parametrize(("module", "names"), IMPORTS)
def test_real_code_imports(module, names):
    namespace: dict = {}
    exec(f"from torch.{module} import {', '.join(names)}", namespace)  # torch has them
    exec(f"from retrograd.{module} import {', '.join(names)}", namespace)
    for name in names:
        assert namespace[name] is not None


def test_flag_namespaces_are_shared_objects():
    import retrograd.backends.cuda
    import retrograd.backends.cudnn as cudnn

    before = rg.backends.cudnn.benchmark
    try:
        cudnn.benchmark = True
        assert rg.backends.cudnn.benchmark is True
    finally:
        cudnn.benchmark = before
    assert retrograd.backends.cuda.matmul is rg.backends.cuda.matmul


@pytest.mark.parametrize(
    "value", [3, (1, 2), [4, 5, 6], (7,), 0, "ab", range(3)], ids=lambda v: repr(v)
)
def test_ntuple_helpers_are_torchs(value):
    from torch.nn.modules import utils as theirs

    from retrograd.nn.modules import utils as ours

    for name in ("_single", "_pair", "_triple", "_quadruple"):
        assert getattr(ours, name)(value) == getattr(theirs, name)(value)
    assert ours._ntuple(5)(value) == theirs._ntuple(5)(value)
    assert ours._reverse_repeat_tuple((1, 2, 3), 2) == theirs._reverse_repeat_tuple((1, 2, 3), 2)
    assert ours._list_with_default([None, 4], [9, 8, 7]) == theirs._list_with_default(
        [None, 4], [9, 8, 7]
    )


def test_consume_prefix_as_torch():
    from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present as theirs

    from retrograd.nn.modules.utils import consume_prefix_in_state_dict_if_present as ours

    def state():
        s = OrderedDict([("module.a.weight", 1), ("module.b", 2), ("other", 3)])
        s._metadata = OrderedDict([("", {}), ("module", {"v": 1}), ("module.a", {"v": 2})])
        return s

    a, b = state(), state()
    ours(a, "module.")
    theirs(b, "module.")
    assert list(a.items()) == list(b.items())
    assert list(a._metadata.items()) == list(b._metadata.items())


def test_ddp_state_dict_loads_into_the_bare_model():
    from retrograd.nn.modules.utils import consume_prefix_in_state_dict_if_present

    model = rg.nn.Linear(2, 3)
    wrapped = {f"module.{k}": np.asarray(v) * 0 + 1 for k, v in model.state_dict().items()}
    consume_prefix_in_state_dict_if_present(wrapped, "module.")
    model.load_state_dict(wrapped)
    assert model.weight.tolist() == [[1.0, 1.0]] * 3


def _cube(lib, once_differentiable):
    class Cube(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**3

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 3 * x**2 * grad

    return Cube


def test_once_differentiable_first_order_and_refused_second_as_torch():
    from torch.autograd.function import once_differentiable as theirs

    from retrograd.autograd.function import once_differentiable as ours

    values = [2.0, -0.5]
    tx = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    x = rg.tensor(values, dtype="float64").require_grad()
    t_cube, cube = _cube(torch, theirs), _cube(rg, ours)

    (tg,) = torch.autograd.grad(t_cube.apply(tx).sum(), tx)
    assert x.grad(cube.apply(x).sum().backward()).tolist() == tg.tolist()

    # a gradient that is a function of x (through y * y) under create_graph: torch refuses
    # the second derivative, and so must we (a constant gradient would give a wrong one)
    ty = t_cube.apply(tx)
    (tg,) = torch.autograd.grad((ty * ty).sum(), tx, create_graph=True)
    y = cube.apply(x)
    (g,) = rg.autograd.grad((y * y).sum(), x, create_graph=True)
    assert g.tolist() == tg.tolist() and g.requires_grad == tg.requires_grad
    with pytest.raises(RuntimeError, match="once_differentiable"):
        (tg * tg).sum().backward()
    with pytest.raises(AutodiffError, match="once_differentiable"):
        (g * g).sum().backward()
    # the graph stays usable
    assert x.grad(cube.apply(x).sum().backward()).tolist() == [12.0, 0.75]


def test_removable_handle_in_torchs_own_form():
    from torch.utils.hooks import RemovableHandle as Theirs

    from retrograd.utils.hooks import RemovableHandle

    # torch holds the tables weakly: an OrderedDict, as its modules' are
    theirs, ours = OrderedDict(), OrderedDict()
    extra_theirs, extra_ours = OrderedDict(), OrderedDict()
    t_handle = Theirs(theirs, extra_dict=extra_theirs)
    handle = RemovableHandle(ours, extra_dict=extra_ours)
    for table, extra, h in ((theirs, extra_theirs, t_handle), (ours, extra_ours, handle)):
        table[h.id] = print
        extra[h.id] = True
    second = RemovableHandle(ours)
    assert second.id != handle.id
    handle.remove()
    t_handle.remove()
    assert (ours, extra_ours) == ({}, {}) == (theirs, extra_theirs)


@pytest.mark.parametrize("text", ["one line", "A(\n(b): B(\n  x\n)\n\n)", "\n", "a\n\n b"])
def test_addindent_is_torchs(text):
    from torch.nn.modules.module import _addindent as theirs

    from retrograd.nn.modules.module import _addindent as ours

    assert ours(text, 2) == theirs(text, 2)


def test_custom_amp_decorators_run_forward_and_backward_as_written():
    from retrograd.cuda.amp import custom_bwd, custom_fwd

    class Scale(rg.autograd.Function):
        @staticmethod
        @custom_fwd(cast_inputs=rg.float32)
        def forward(ctx, x):
            return x * 2

        @staticmethod
        @custom_bwd
        def backward(ctx, grad):
            return grad * 2

    x = rg.tensor([1.0, 3.0], dtype="float64").require_grad()
    out = Scale.apply(x)
    assert out.dtype == x.dtype  # retrograd never autocasts: no region casts it
    assert x.grad(out.sum().backward()).tolist() == [2.0, 2.0]
    with pytest.raises(rg.errors.InvalidArgumentError, match="device_type"):
        rg.amp.custom_fwd(device_type="tpu")


def test_private_init_helpers_are_torchs():
    from torch.nn import init as theirs

    from retrograd.nn import init as ours

    shape = (6, 3, 2, 2)
    weight = rg.zeros(shape)
    for mode in ("fan_in", "fan_out"):
        assert ours._calculate_correct_fan(weight, mode) == theirs._calculate_correct_fan(
            torch.zeros(shape), mode
        )
    with pytest.raises(rg.errors.InvalidArgumentError, match="fan_in, fan_out"):
        ours._calculate_correct_fan(weight, "fan_avg")
    ours._no_grad_trunc_normal_(weight, 0.0, 1.0, -0.5, 0.5)
    assert float(abs(weight).max().item()) <= 0.5
    ours._no_grad_fill_(weight, 3.0)
    assert weight.tolist() == torch.full(shape, 3.0).tolist()


def test_path_modules_are_modules_with_torchs_names():
    import retrograd.optim.adam as adam

    assert isinstance(adam, types.ModuleType) and adam.__name__ == "retrograd.optim.adam"
    assert rg.optim.adam is adam and "Adam" in dir(adam)
    with pytest.raises(AttributeError):
        adam.NoSuchOptimizer  # noqa: B018
