"""nn.utils against torch.nn.utils: weight and spectral normalization (hook forms and
parametrizations), parametrize, batch-norm fusion, get_total_norm / clip_grads_with_norm_ and
skip_init. The same model with the same weights (torch's state dict loaded unchanged, its
keys equal to ours) and the same loss gives the same outputs and gradients to ~1e-10 in
float64."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn
from retrograd.errors import AutodiffError, InvalidArgumentError, ShapeError
from retrograd.nn.utils import parametrizations, parametrize

torch = pytest.importorskip("torch")
TOL = {"rtol": 1e-10, "atol": 1e-12}
pytestmark = pytest.mark.filterwarnings("ignore:`torch.nn.utils.weight_norm` is deprecated")

LAYERS = {
    "linear": (lambda m: m.Linear(4, 3), (5, 4)),
    "conv2d": (lambda m: m.Conv2d(2, 3, 3), (2, 2, 5, 5)),
    "conv-transpose2d": (lambda m: m.ConvTranspose2d(3, 2, 3), (2, 3, 4, 4)),
}


def pair(layer: str, seed: int = 0):
    build, shape = LAYERS[layer]
    torch.manual_seed(seed)
    return build(torch.nn).double(), build(nn).double(), shape


def load_torch_state(ours, theirs) -> None:
    """torch's state dict into ours, unchanged; the keys are the same, in the same order."""
    state = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
    assert list(ours.state_dict()) == list(state)
    ours.load_state_dict(state)


def same_step(ours, theirs, shape, seed: int = 1) -> None:
    """One forward and backward of ``sum(r * model(x))`` in both: outputs and the gradient of
    every parameter (by torch's names) agree."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    theirs_out = theirs(torch.tensor(x))
    r = rng.standard_normal(tuple(theirs_out.shape))
    theirs.zero_grad()
    (theirs_out * torch.tensor(r)).sum().backward()
    ours_out = ours(rg.tensor(x))
    grads = (ours_out * rg.tensor(r)).sum().backward()
    np.testing.assert_allclose(ours_out.numpy(), theirs_out.detach().numpy(), **TOL)
    ours_params = dict(ours.named_parameters())
    assert list(ours_params) == [name for name, _ in theirs.named_parameters()]
    for name, p in theirs.named_parameters():
        np.testing.assert_allclose(
            ours_params[name].grad(grads).numpy(), p.grad.numpy(), **TOL, err_msg=name
        )
    for name, b in theirs.named_buffers():
        np.testing.assert_allclose(ours.get_buffer(name).numpy(), b.numpy(), **TOL, err_msg=name)


@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("dim", [0, 1, None, -1])
def test_weight_norm_hook_matches_torch(layer, dim):
    theirs, ours, shape = pair(layer)
    theirs = torch.nn.utils.weight_norm(theirs, dim=dim)
    ours = nn.utils.weight_norm(ours, dim=dim)
    load_torch_state(ours, theirs)
    same_step(ours, theirs, shape)
    torch.nn.utils.remove_weight_norm(theirs)
    nn.utils.remove_weight_norm(ours)
    load_torch_state(ours, theirs)  # the keys are back to weight and bias
    same_step(ours, theirs, shape, seed=2)


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_spectral_norm_hook_matches_torch(layer):
    theirs, ours, shape = pair(layer)
    theirs = torch.nn.utils.spectral_norm(theirs, n_power_iterations=2)
    ours = nn.utils.spectral_norm(ours, n_power_iterations=2)
    load_torch_state(ours, theirs)
    for seed in range(3):  # training: u and v move at each forward, in both
        same_step(ours, theirs, shape, seed)
    theirs.eval(), ours.eval()
    same_step(ours, theirs, shape, seed=7)
    torch.nn.utils.remove_spectral_norm(theirs)
    nn.utils.remove_spectral_norm(ours)
    load_torch_state(ours, theirs)
    same_step(ours, theirs, shape, seed=8)


def test_hook_forms_refuse_twice_and_missing():
    layer = nn.utils.weight_norm(nn.Linear(2, 2))
    with pytest.raises(InvalidArgumentError, match="two weight_norm hooks"):
        nn.utils.weight_norm(layer)
    with pytest.raises(InvalidArgumentError, match="spectral_norm of 'weight' not found"):
        nn.utils.remove_spectral_norm(layer)
    with pytest.raises(InvalidArgumentError, match="no parameter 'kernel'"):
        nn.utils.spectral_norm(nn.Linear(2, 2), name="kernel")


@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("dim", [0, 1, None])
def test_weight_norm_parametrization_matches_torch(layer, dim):
    theirs, ours, shape = pair(layer)
    theirs = torch.nn.utils.parametrizations.weight_norm(theirs, dim=dim)
    ours = parametrizations.weight_norm(ours, dim=dim)
    load_torch_state(ours, theirs)
    same_step(ours, theirs, shape)


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_spectral_norm_parametrization_matches_torch(layer):
    theirs, ours, shape = pair(layer)
    theirs = torch.nn.utils.parametrizations.spectral_norm(theirs)
    ours = parametrizations.spectral_norm(ours)
    load_torch_state(ours, theirs)
    for seed in range(3):
        same_step(ours, theirs, shape, seed)
    theirs.eval(), ours.eval()
    same_step(ours, theirs, shape, seed=5)


def symmetric(module):
    class Symmetric(module.Module):
        def forward(self, x):
            return x.triu() + x.triu(1).transpose(0, 1)

    return Symmetric()


def scaled(module):
    class Scaled(module.Module):
        def __init__(self):
            super().__init__()
            two = np.array([2.0])
            self.scale = module.Parameter(rg.tensor(two) if module is nn else torch.tensor(two))

        def forward(self, x):
            return x * self.scale

        def right_inverse(self, x):
            return x / 2.0

    return Scaled()


def parametrized_pair(seed: int, out_features: int, *makers):
    """torch's and our Linear(3, out_features) with the same weights and the parametrizations
    ``makers`` (each called with ``torch.nn`` or ``nn``) registered on ``weight``, in order."""
    torch.manual_seed(seed)
    theirs = torch.nn.Linear(3, out_features).double()
    ours = nn.Linear(3, out_features).double()
    for make in makers:
        torch.nn.utils.parametrize.register_parametrization(theirs, "weight", make(torch.nn))
        parametrize.register_parametrization(ours, "weight", make(nn))
    load_torch_state(ours, theirs)
    return ours, theirs


def test_parametrize_chain_matches_torch():
    ours, theirs = parametrized_pair(3, 3, symmetric, scaled)
    tp, op = torch.nn.utils.parametrize, parametrize
    assert op.is_parametrized(ours) and op.is_parametrized(ours, "weight")
    assert not op.is_parametrized(ours, "bias")
    assert op.type_before_parametrizations(ours) is nn.Linear
    assert type(ours).__name__ == "ParametrizedLinear"
    same_step(ours, theirs, (4, 3))
    with tp.cached(), op.cached():
        assert ours.weight is ours.weight
        same_step(ours, theirs, (4, 3), seed=3)


def test_parametrized_assignment_and_removal_match_torch():
    ours, theirs = parametrized_pair(4, 3, scaled)
    tp, op = torch.nn.utils.parametrize, parametrize
    value = np.arange(9.0).reshape(3, 3)
    with torch.no_grad():
        theirs.weight = torch.tensor(value)
    ours.weight = rg.tensor(value)
    load_torch_state(ours, theirs)  # same state after the assignment through right_inverse
    np.testing.assert_allclose(ours.weight.numpy(), value, **TOL)
    original = ours.parametrizations.weight.original
    tp.remove_parametrizations(theirs, "weight")
    op.remove_parametrizations(ours, "weight")
    assert ours.weight is original  # the same Parameter, holding the parametrized value
    assert type(ours) is nn.Linear and "parametrizations" not in dict(ours.named_children())
    load_torch_state(ours, theirs)
    same_step(ours, theirs, (2, 3))


def test_remove_parametrizations_without_leaving_them():
    ours, theirs = parametrized_pair(5, 2, scaled)
    torch.nn.utils.parametrize.remove_parametrizations(theirs, "weight", leave_parametrized=False)
    parametrize.remove_parametrizations(ours, "weight", leave_parametrized=False)
    load_torch_state(ours, theirs)
    np.testing.assert_allclose(ours.weight.numpy(), theirs.weight.detach().numpy(), **TOL)
    weight_normed = parametrizations.weight_norm(nn.Linear(3, 2))
    with pytest.raises(InvalidArgumentError, match="sequence of tensors"):
        parametrize.remove_parametrizations(weight_normed, "weight", leave_parametrized=False)
    parametrize.remove_parametrizations(weight_normed, "weight")
    assert sorted(weight_normed.state_dict()) == ["bias", "weight"]


def test_parametrize_errors():
    class Flatten(nn.Module):
        def forward(self, x):
            return x.reshape(-1)

    with pytest.raises(ShapeError, match="changes the shape"):
        parametrize.register_parametrization(nn.Linear(2, 2), "weight", Flatten())
    with pytest.raises(InvalidArgumentError, match="with name 'kernel'"):
        parametrize.register_parametrization(nn.Linear(2, 2), "kernel", Flatten())
    with pytest.raises(InvalidArgumentError, match="does not have a parametrization"):
        parametrize.remove_parametrizations(nn.Linear(2, 2), "weight")
    layer = parametrize.register_parametrization(nn.Linear(2, 2), "weight", symmetric(nn))
    with pytest.raises(InvalidArgumentError, match="right_inverse"):
        layer.weight = rg.zeros((2, 2))


@pytest.mark.parametrize("transpose", [False, True])
def test_fuse_conv_bn_eval_matches_torch(transpose):
    torch.manual_seed(6)
    conv_cls = "ConvTranspose2d" if transpose else "Conv2d"
    theirs_conv = getattr(torch.nn, conv_cls)(2, 3, 3).double().eval()
    theirs_bn = torch.nn.BatchNorm2d(3).double().eval()
    with torch.no_grad():
        theirs_bn.running_mean.uniform_(-1, 1)
        theirs_bn.running_var.uniform_(0.5, 2)
        theirs_bn.weight.uniform_(0.5, 2)
        theirs_bn.bias.uniform_(-1, 1)
    ours_conv = getattr(nn, conv_cls)(2, 3, 3).double().eval()
    ours_bn = nn.BatchNorm2d(3).double().eval()
    load_torch_state(ours_conv, theirs_conv)
    load_torch_state(ours_bn, theirs_bn)
    fused_theirs = torch.nn.utils.fuse_conv_bn_eval(theirs_conv, theirs_bn, transpose)
    fused_ours = nn.utils.fuse_conv_bn_eval(ours_conv, ours_bn, transpose)
    assert fused_ours is not ours_conv and isinstance(fused_ours.weight, nn.Parameter)
    for name, value in fused_theirs.state_dict().items():
        np.testing.assert_allclose(fused_ours.state_dict()[name], value.numpy(), **TOL)
    x = np.random.default_rng(0).standard_normal((2, 2, 5, 5))
    np.testing.assert_allclose(
        fused_ours(rg.tensor(x)).numpy(), ours_bn(ours_conv(rg.tensor(x))).numpy(), **TOL
    )


def test_fuse_linear_bn_eval_matches_torch():
    torch.manual_seed(7)
    theirs_linear, theirs_bn = torch.nn.Linear(4, 3).double(), torch.nn.BatchNorm1d(3).double()
    with torch.no_grad():
        theirs_bn.running_mean.uniform_(-1, 1)
        theirs_bn.running_var.uniform_(0.5, 2)
    theirs_linear.eval(), theirs_bn.eval()
    ours_linear, ours_bn = nn.Linear(4, 3).double().eval(), nn.BatchNorm1d(3).double().eval()
    load_torch_state(ours_linear, theirs_linear)
    load_torch_state(ours_bn, theirs_bn)
    fused_theirs = torch.nn.utils.fuse_linear_bn_eval(theirs_linear, theirs_bn)
    fused_ours = nn.utils.fuse_linear_bn_eval(ours_linear, ours_bn)
    for name, value in fused_theirs.state_dict().items():
        np.testing.assert_allclose(fused_ours.state_dict()[name], value.numpy(), **TOL)
    with pytest.raises(InvalidArgumentError, match="Fusion only for eval"):
        nn.utils.fuse_linear_bn_eval(ours_linear.train(), ours_bn)
    with pytest.raises(ShapeError, match="out_features"):
        nn.utils.fuse_linear_bn_eval(nn.Linear(4, 2).eval(), ours_bn)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.5, float("inf")])
def test_total_norm_and_clip_with_norm_match_torch(norm_type):
    rng = np.random.default_rng(8)
    arrays = [rng.standard_normal((3, 4)), rng.standard_normal(5)]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    sum((p * p * p).sum() for p in theirs).backward()
    total_theirs = torch.nn.utils.get_total_norm([p.grad for p in theirs], norm_type)
    torch.nn.utils.clip_grads_with_norm_(theirs, 1.5, total_theirs)
    ours = [rg.tensor(a).require_grad() for a in arrays]
    grads = sum((p * p * p).sum() for p in ours).backward()
    total = nn.utils.get_total_norm([p.grad(grads) for p in ours], norm_type)
    np.testing.assert_allclose(total.numpy(), total_theirs.numpy(), **TOL)
    nn.utils.clip_grads_with_norm_(grads, ours, 1.5, total)
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.grad(grads).numpy(), t.grad.numpy(), **TOL)


def test_clipping_in_torchs_form_says_how_to_call_it():
    """torch's ``clip_grad_norm_(parameters, max_norm)`` (gradients kept on the parameters)
    gets the library's error with the call to write instead, not a TypeError about a missing
    argument; the gradients are left as they were."""
    w = rg.tensor([3.0, 4.0]).require_grad()
    grads = (w * w).sum().backward()
    with pytest.raises(AutodiffError, match="gradients are a value"):
        nn.utils.clip_grads_with_norm_([w], 1.0, 5.0, None)
    with pytest.raises(AutodiffError, match=r"clip_grad_norm_\(grads, model.parameters\(\)"):
        nn.utils.clip_grad_norm_([w], 1.0)
    with pytest.raises(AutodiffError, match="clip_grad_norm_: gradients are a value"):
        nn.utils.clip_grad_norm_(iter([w]), max_norm=1.0)
    with pytest.raises(AutodiffError, match="clip_grad_value_: gradients are a value"):
        nn.utils.clip_grad_value_([w], 0.5)
    with pytest.raises(InvalidArgumentError, match="clip_grad_norm_: missing argument 'max_norm'"):
        nn.utils.clip_grad_norm_(grads, [w])
    assert w.grad(grads).tolist() == [6.0, 8.0]
    assert nn.utils.clip_grad_norm_(grads, [w], 1.0) == 10.0
    with pytest.raises(InvalidArgumentError, match="non-finite"):
        nn.utils.get_total_norm([rg.tensor([float("nan")])], error_if_nonfinite=True)


def test_skip_init():
    layer = nn.utils.skip_init(nn.Linear, 3, 2, bias=False)
    assert layer.weight.shape == (2, 3) and layer.bias is None

    class NoDevice(nn.Module):
        def __init__(self, n):
            super().__init__()

    with pytest.raises(InvalidArgumentError, match="'device' arg"):
        nn.utils.skip_init(NoDevice, 3)
