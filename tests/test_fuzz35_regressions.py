"""Regressions found by round 35 of the differential fuzzer (``tests/test_fuzz35.py``): hooks
and the functional use of modules, against torch 2.13. Expected behaviour is torch's."""

import numpy as np
import pytest

import retrograd as rg

nn = rg.nn
module_hooks = nn.modules.module


def test_a_global_forward_hook_removed_by_a_sub_modules_call_does_not_run_for_the_outer_one():
    # torch reads the global table when each module's forward hooks start: a global hook
    # that removes itself on the inner Tanh is not called for the Sequential around it;
    # retrograd had copied the table when the Sequential's call began and called it again
    calls = []
    handles = []

    def once(module, args, output):
        calls.append(type(module).__name__)
        handles[0].remove()

    model = nn.Sequential(nn.Tanh())
    handles.append(module_hooks.register_module_forward_hook(once))
    try:
        model(rg.ones(2, 3))
    finally:
        handles[0].remove()
    assert calls == ["Tanh"]


def test_a_full_backward_hook_removed_after_the_forward_still_sees_that_forward():
    # torch's BackwardHook keeps the hooks registered when the forward ran: removing one
    # between the forward and the backward takes effect from the next forward; retrograd
    # read the live table in backward and skipped it, its gradient replacement lost
    layer = nn.Linear(2, 2, bias=False)
    nn.init.ones_(layer.weight)
    seen = []

    def double(module, grad_input, grad_output):
        seen.append("backward")
        return (grad_input[0] * 2.0,)

    handle = layer.register_full_backward_hook(double)
    x = rg.tensor([[1.0, 2.0]]).requires_grad_()
    y = layer(x)
    handle.remove()
    grads = y.sum().backward()
    assert seen == ["backward"]
    np.testing.assert_allclose(x.grad(grads).numpy(), [[4.0, 4.0]])  # torch: [[4., 4.]]
    x2 = rg.tensor([[1.0, 2.0]]).requires_grad_()
    grads = layer(x2).sum().backward()
    assert seen == ["backward"]
    np.testing.assert_allclose(x2.grad(grads).numpy(), [[2.0, 2.0]])


def test_orthogonal_householder_without_trivialization():
    # torch: the Householder map without trivialization registers (its right_inverse is the
    # geqrf of the weight) and takes assignments; retrograd refused it ("not supported")
    from retrograd.nn.utils import parametrizations

    rng = np.random.default_rng(0)
    for shape in [(3, 3), (4, 2), (2, 4)]:
        w = rng.standard_normal(shape)
        layer = nn.Linear(shape[1], shape[0], bias=False).double()
        layer.weight = nn.Parameter(rg.tensor(w))
        parametrizations.orthogonal(layer, orthogonal_map="householder", use_trivialization=False)
        # the weight is the Q of w's QR factorization with R's diagonal positive (torch's)
        q, r = np.linalg.qr(w if shape[0] >= shape[1] else w.T)
        q = q * np.sign(np.diag(r))
        want = q if shape[0] >= shape[1] else q.T
        np.testing.assert_allclose(layer.weight.numpy(), want, atol=1e-10)
        # an orthogonal matrix assigned is read back unchanged
        target, _ = np.linalg.qr(rng.standard_normal((max(shape), min(shape))))
        target = target if shape[0] >= shape[1] else target.T
        layer.weight = rg.tensor(target)
        np.testing.assert_allclose(layer.weight.numpy(), target, atol=1e-10)
        grads = layer(rg.ones(1, shape[1], dtype="float64")).sum().backward()
        original = layer.parametrizations.weight.original
        assert original.grad(grads).shape == shape


@pytest.mark.parametrize("call", ["func", "stateless"])
def test_functional_call_of_a_name_under_a_missing_module_raises_attribute_error(call):
    # torch: AttributeError "Sequential has no attribute `nothing`" (its lookup is getattr's);
    # retrograd's KeyMismatchError escaped ``except AttributeError``
    functional_call = (
        rg.func.functional_call if call == "func" else nn.utils.stateless.functional_call
    )
    model = nn.Sequential(nn.Linear(2, 2))
    with pytest.raises(AttributeError) as caught:
        functional_call(model, {"nothing.here": rg.zeros(2)}, (rg.ones(1, 2),))
    assert isinstance(caught.value, rg.RetrogradError)
    assert isinstance(caught.value, KeyError)  # what retrograd raised before still catches it
    assert "nothing.here" in str(caught.value)


def test_global_full_backward_hooks():
    # torch's nn.modules.module.register_module_full_backward_pre_hook and
    # register_module_full_backward_hook (missing in retrograd): every module's backward, the
    # global hooks before the module's own, a result replacing the gradient
    log = []

    def pre(module, grad_output):
        log.append((type(module).__name__, "pre"))

    def full(module, grad_input, grad_output):
        log.append((type(module).__name__, "full"))
        if isinstance(module, nn.Linear):
            return (grad_input[0] * 2.0,)
        return None

    model = nn.Sequential(nn.Linear(2, 2), nn.Tanh())
    nn.init.constant_(model[0].weight, 0.5)
    nn.init.constant_(model[0].bias, 0.1)
    model[1].register_full_backward_hook(lambda m, gi, go: log.append(("Tanh", "own")))
    handles = [
        module_hooks.register_module_full_backward_pre_hook(pre),
        module_hooks.register_module_full_backward_hook(full),
    ]
    try:
        x = rg.tensor([[1.0, 2.0]]).requires_grad_()
        grads = model(x).sum().backward()
    finally:
        for handle in handles:
            handle.remove()
    assert log == [
        ("Sequential", "pre"),
        ("Tanh", "pre"),
        ("Tanh", "full"),
        ("Tanh", "own"),
        ("Linear", "pre"),
        ("Linear", "full"),
        ("Sequential", "full"),
    ]
    # d/dx sum(tanh(W x + b)) = W^T (1 - tanh(1.6)^2), doubled by the hook on Linear
    slope = 1.0 - np.tanh(1.6) ** 2
    np.testing.assert_allclose(x.grad(grads).numpy(), [[2 * slope, 2 * slope]], rtol=1e-5)
    log.clear()
    model(rg.ones(1, 2, requires_grad=True)).sum().backward()
    assert log == [("Tanh", "own")]  # removed: only the module's own hook is left


@pytest.mark.parametrize(
    "make",
    [
        lambda: nn.Linear(2, 2),
        lambda: nn.Tanh(),
        lambda: nn.Sequential(nn.Linear(2, 2), nn.ReLU()),
        lambda: nn.LayerNorm(2),
    ],
)
def test_a_built_in_module_takes_its_tensor_as_torchs_keyword_input(make):
    # torch's modules name their tensor ``input`` (``layer(input=x)``, ``functional_call(m,
    # params, (), {"input": x})``, a with_kwargs hook's kwargs); retrograd's ``x`` refused it
    rg.manual_seed(0)
    layer = make()
    x = rg.tensor([[0.5, -1.0], [2.0, 0.25]])
    want = layer(x).numpy()
    np.testing.assert_allclose(layer(input=x).numpy(), want)
    params = dict(layer.named_parameters())
    out = rg.func.functional_call(layer, params, (), {"input": x})
    np.testing.assert_allclose(out.numpy(), want)
    seen = []
    layer.register_forward_pre_hook(lambda m, a, k: seen.append((a, sorted(k))), with_kwargs=True)
    layer(input=x)
    assert seen == [((), ["input"])]  # torch: the keyword stays a keyword for the hooks

    class Mine(nn.Module):  # a module of one's own keeps Python's refusal, as in torch
        def forward(self, x):
            return x

    with pytest.raises(TypeError, match="input"):
        Mine()(input=x)


def test_full_backward_hooks_of_a_module_called_with_its_tensor_by_keyword():
    # torch watches the positional arguments only: the hook gets grad_input () and the
    # gradient flows on; retrograd refused the call ("called with one tensor, this call has 0")
    layer = nn.Linear(2, 2)
    nn.init.constant_(layer.weight, 0.5)
    nn.init.zeros_(layer.bias)
    log = []
    layer.register_full_backward_hook(lambda m, gi, go: log.append((gi, go[0].tolist())))
    x = rg.ones(1, 2, requires_grad=True)
    grads = layer(input=x).sum().backward()
    assert log == [((), [[1.0, 1.0]])]
    np.testing.assert_allclose(x.grad(grads).numpy(), [[1.0, 1.0]])
