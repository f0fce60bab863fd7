"""Regressions found by fuzzing round 19 (``tests/fuzz19_cases.py``), each checked against
torch 2.13 or the arithmetic it states."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _failing(lib):
    class Failing(lib.nn.Module):
        def forward(self, x):
            raise ValueError("forward fails")

    return Failing()


def _always_call_log(lib, where):
    """The calls a forward hook registered with ``always_call`` sees when the forward (or a
    pre-hook, or another hook) raises."""
    log = []

    def seen(out):
        return None if out is None else out.tolist()

    m = _failing(lib) if where == "forward" else lib.nn.Identity()
    if where == "pre_hook":
        m.register_forward_pre_hook(lambda mod, args: 1 / 0)
    m.register_forward_hook(
        lambda mod, args, out: log.append(("always", seen(out))), always_call=True
    )
    m.register_forward_hook(lambda mod, args, out: log.append(("plain", seen(out))))
    if where == "hook":
        m.register_forward_hook(lambda mod, args, out: 1 / 0, prepend=True)
    m.register_forward_hook(
        lambda mod, args, kwargs, out: log.append(("kwargs", sorted(kwargs), seen(out))),
        with_kwargs=True,
        always_call=True,
    )
    with pytest.raises((ValueError, ZeroDivisionError)) as raised:
        m(lib.ones(2))
    return log, raised.type


@pytest.mark.parametrize("where", ["forward", "pre_hook", "hook"])
def test_always_call_forward_hooks_run_when_the_call_raises(where):
    # always_call was accepted and ignored: no hook ran when the forward raised
    want = _always_call_log(torch, where)
    got = _always_call_log(rg, where)
    assert got == want
    assert got[0]  # (the always-called hooks ran, with the output so far)


def test_an_always_call_hook_that_raises_too_is_silenced_with_a_warning():
    # torch warns about the hook's error and raises the forward's
    m = _failing(rg)
    m.register_forward_hook(lambda mod, args, out: 1 / 0, always_call=True)
    with pytest.warns(UserWarning, match="always_call"), pytest.raises(ValueError, match="fails"):
        m(rg.ones(2))


def test_a_with_kwargs_pre_hook_must_return_an_args_kwargs_pair():
    # a bare ValueError ("not enough values to unpack") before; torch raises RuntimeError
    def bad(mod, args, kwargs):
        return args  # a 1-tuple, not (args, kwargs)

    t = torch.nn.Identity()
    t.register_forward_pre_hook(bad, with_kwargs=True)
    with pytest.raises(RuntimeError, match="new_args, new_kwargs"):
        t(torch.ones(2))
    m = rg.nn.Identity()
    m.register_forward_pre_hook(bad, with_kwargs=True)
    with pytest.raises(rg.InvalidArgumentError, match=r"Identity.*\(new_args, new_kwargs\)"):
        m(rg.ones(2))


@pytest.mark.parametrize("dim", [2, -3])
@pytest.mark.parametrize("form", ["hook", "parametrization"])
def test_weight_norm_refuses_a_dim_the_weight_does_not_have(form, dim):
    # taken for one norm over the whole weight (dim=None's) before; torch raises IndexError
    def apply(lib, module, **kw):
        utils = lib.nn.utils
        return (utils.weight_norm if form == "hook" else utils.parametrizations.weight_norm)(
            module, **kw
        )

    with pytest.raises(IndexError, match="out of range"):
        apply(torch, torch.nn.Linear(4, 3), dim=dim)
    with pytest.raises(rg.ShapeError, match=f"weight_norm: dimension {dim} is out of range"):
        apply(rg, rg.nn.Linear(4, 3), dim=dim)
    # a bias has one dimension: dim=1 is out of range too
    with pytest.raises(IndexError):
        apply(torch, torch.nn.Linear(4, 3), name="bias", dim=1)
    with pytest.raises(rg.ShapeError, match="weight_norm"):
        apply(rg, rg.nn.Linear(4, 3), name="bias", dim=1)
    # -1 and None are the one-norm forms, as torch's (a 0-d g)
    for one in (-1, None):
        g = next(v for k, v in apply(rg, rg.nn.Linear(4, 3), dim=one).state_dict().items() if
                 k.endswith(("weight_g", "original0")))  # fmt: skip
        assert tuple(g.shape) == ()


def _scaler_run(lib, init, growth, steps, dtype):
    w = lib.tensor(np.array([1.0, -2.0, 0.5]), dtype=getattr(lib, dtype), requires_grad=True)
    opt = lib.optim.SGD([w], lr=0.1)
    scaler = lib.amp.GradScaler("cpu", init_scale=init, growth_factor=growth, growth_interval=1)
    scales, scaled = [], []
    for _ in range(steps):
        loss = scaler.scale((w * w).sum())
        scaled.append(float(loss))
        if lib is torch:
            opt.zero_grad()
            loss.backward()
            scaler.step(opt)
        else:
            scaler.step(opt, loss.backward())
        scaler.update()
        scales.append(scaler.get_scale())
    values = w.detach().numpy() if lib is torch else w.numpy()
    return scales, scaled, values


@pytest.mark.parametrize(
    "init, growth, dtype",
    [(2.0**127, 2.0, "float64"), (3.0, 1.5, "float64"), (0.75, 3.0, "float64")],
)
def test_grad_scaler_scale_is_a_float32_value(init, growth, dtype):
    # the scale was a float64: it grew past float32's range (every float32 loss then scaled to
    # inf, every step skipped) and a growth by 1.5 or an unscale by 1/3 kept digits torch's
    # float32 scale does not have
    want = _scaler_run(torch, init, growth, 3, dtype)
    got = _scaler_run(rg, init, growth, 3, dtype)
    assert got[0] == want[0]  # (exactly: both float32 values)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-12, atol=0)


def test_grad_scaler_never_grows_past_float32():
    scaler = rg.amp.GradScaler("cpu", init_scale=2.0**127, growth_interval=1)
    w = rg.tensor([1.0], dtype="float32").require_grad()
    opt = rg.optim.SGD([w], lr=0.0)
    scaler.step(opt, scaler.scale((w * 1e-30).sum()).backward())
    scaler.update()  # a good step: the scale would grow to 2**128, past float32's range
    assert scaler.get_scale() == 2.0**127


def _misuse(lib, what):
    w = lib.tensor([1.0, 2.0], requires_grad=True)
    opt = lib.optim.SGD([w], lr=0.1)
    scaler = lib.amp.GradScaler("cpu")
    loss = scaler.scale((w * w).sum())
    grads = () if lib is torch else (loss.backward(),)
    if lib is torch:
        loss.backward()
    if what == "update_first":
        scaler.update()
    elif what == "step_twice":
        scaler.step(opt, *grads)
        scaler.step(opt, *grads)
    else:
        scaler.step(opt, *grads, closure=lambda: None)


@pytest.mark.parametrize(
    "what, message",
    [
        ("update_first", "no inf checks were recorded"),
        ("step_twice", "already been called since the last update"),
        ("closure", "closure"),
    ],
)
def test_grad_scaler_refuses_what_torch_refuses(what, message):
    # update() without a step changed nothing and a second step() stepped again (torch
    # raises); a closure failed inside the optimizer with a bare TypeError
    with pytest.raises((AssertionError, RuntimeError)):
        _misuse(torch, what)
    with pytest.raises(rg.AutodiffError, match=message):
        _misuse(rg, what)


def _state_hooks(lib):
    log = []
    model = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.Linear(2, 1))
    model.register_state_dict_pre_hook(lambda m, prefix, keep: log.append(("pre", prefix)))
    model[1].register_state_dict_post_hook(
        lambda m, state, prefix, meta: log.append(("post", prefix, sorted(state)))
    )
    model[0]._register_state_dict_hook(
        lambda m, state, prefix, meta: {k: v for k, v in state.items() if "bias" not in k}
    )  # (a child's returned dict replaces nothing above it, as in torch)
    keys = sorted(model.state_dict())
    fresh = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.Linear(2, 1))
    fresh[0].register_load_state_dict_pre_hook(
        lambda m, state, prefix, *rest: log.append(("load_pre", prefix))
    )

    def post(module, incompatible):
        log.append(("load_post", list(incompatible.missing_keys)))
        incompatible.missing_keys.clear()  # a strict load then succeeds

    fresh.register_load_state_dict_post_hook(post)
    state = {k: v for k, v in model.state_dict().items() if k != "1.bias"}
    result = fresh.load_state_dict(state)
    return keys, log, list(result.missing_keys)


def test_state_dict_and_load_hooks_as_torch():
    # register_state_dict_pre_hook/post_hook, _register_state_dict_hook and the load pre/post
    # hooks did not exist (AttributeError)
    assert _state_hooks(rg) == _state_hooks(torch)


def test_functional_call_with_a_name_of_no_submodule_says_so():
    # a bare AttributeError from get_submodule (torch's is bare too)
    m = rg.nn.Linear(2, 2)
    with pytest.raises(rg.errors.KeyMismatchError, match=r"functional_call: 'c\.w'"):
        rg.func.functional_call(m, {"c.w": rg.ones(2)}, (rg.ones(2),))
    with pytest.raises(AttributeError):
        torch.func.functional_call(torch.nn.Linear(2, 2), {"c.w": torch.ones(2)}, torch.ones(2))


def _hook_tables(lib):
    m = lib.nn.Linear(2, 2)
    handles = [
        m.register_forward_pre_hook(lambda *a: None),
        m.register_forward_hook(lambda *a: None),
        m.register_forward_hook(lambda *a: None, prepend=True),
        m.register_full_backward_hook(lambda *a: None),
        m.register_full_backward_pre_hook(lambda *a: None),
    ]
    sizes = []
    for h in handles:
        tables = (m._forward_pre_hooks, m._forward_hooks, m._backward_hooks, m._backward_pre_hooks)
        sizes.append([len(t) for t in tables])
        h.remove()
    return sizes


def test_the_hook_tables_torch_code_reads():
    # only _forward_pre_hooks existed: code testing len(module._forward_hooks) failed
    assert _hook_tables(rg) == _hook_tables(torch)


def test_grad_scaler_refuses_to_unscale_float16_gradients():
    # torch refuses (ValueError "Attempting to unscale FP16 gradients."); they were unscaled
    w = torch.tensor([1.0], dtype=torch.float16, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale((w * w).sum()).backward()
    with pytest.raises(ValueError, match="FP16"):
        scaler.unscale_(opt)
    backend = rg.Autodiff(rg.TorchBackend("cpu"))  # (NumPy has no float16 tensors)
    v = rg.tensor([1.0], dtype="float16", backend=backend).require_grad()
    ropt = rg.optim.SGD([v], lr=0.1)
    rscaler = rg.amp.GradScaler("cpu")
    grads = rscaler.scale((v * v).sum()).backward()
    with pytest.raises(rg.DTypeError, match="float16"):
        rscaler.unscale_(ropt, grads)


def _global_hooks(lib):
    log = []
    registry = lib.nn.modules.module
    model = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.ReLU())
    model[0].load_state_dict({"weight": lib.tensor([[1.0, -2.0], [0.5, 1.0]]),
                              "bias": lib.tensor([0.25, -0.5])})  # fmt: skip
    model[0].register_forward_pre_hook(lambda m, args: log.append(("own pre", type(m).__name__)))
    handles = [
        registry.register_module_forward_pre_hook(
            lambda m, args: log.append(("pre", type(m).__name__))
        ),
        registry.register_module_forward_hook(
            lambda m, args, kwargs, out: log.append(("post", type(m).__name__, sorted(kwargs))),
            with_kwargs=True,
        ),
        registry.register_module_forward_hook(lambda m, args, out: out * 2),
    ]
    try:
        first = model(lib.ones(2)).tolist()
        handles[2].remove()
        second = model(lib.ones(2)).tolist()
    finally:
        for h in handles:
            h.remove()
    model(lib.ones(2))  # (no global hook left)
    return log, first, second


def test_global_forward_hooks_as_torch():
    # nn.modules.module.register_module_forward_pre_hook/forward_hook did not exist
    assert _global_hooks(rg) == _global_hooks(torch)


def _load_keys(lib, strict):
    inner = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.BatchNorm1d(2))
    model = lib.nn.Sequential(inner, lib.nn.ModuleDict({"a": lib.nn.Linear(2, 1), "b": inner}))
    state = {k: np.asarray(v) for k, v in model.state_dict().items()}
    # an old checkpoint: no num_batches_tracked under the shared norm's second name; a missing
    # bias; keys no module has, in an order of their own
    del state["1.b.1.num_batches_tracked"]
    if not strict:
        del state["1.a.bias"]
        state = {"1.a.zz": np.zeros(1), **state, "0.0.weight.x": np.zeros(1), "zz": np.zeros(1)}
    try:
        result = model.load_state_dict({k: lib.tensor(v) for k, v in state.items()}, strict)
    except (RuntimeError, rg.RetrogradError):
        return "raised"
    return list(result.missing_keys), list(result.unexpected_keys)


@pytest.mark.parametrize("strict", [False, True])
def test_load_state_dict_lists_keys_as_torch_with_shared_modules(strict):
    # a module reachable under two names was handed its state under the first only: the
    # norm's missing num_batches_tracked (an old checkpoint, which torch completes) was listed
    # as missing under the second name, and a strict load refused it; unexpected keys came in
    # the state's order, torch's come module by module
    assert _load_keys(rg, strict) == _load_keys(torch, strict)
