"""torch submodules that training scripts import, against torch 2.13: ``utils.flop_counter``
(FLOPs per module as torch's ``FlopCounterMode`` counts them), ``utils.benchmark``,
``library`` (custom ops), ``distributed.elastic.multiprocessing.errors``,
``distributed.checkpoint`` (one process) and the refused ``export`` / ``fsdp`` / ``tensor``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from retrograd.utils.flop_counter import FlopCounterMode
from torch.utils.flop_counter import FlopCounterMode as TorchFlopCounterMode

import retrograd as rg
from retrograd.context import current_backend


# -- utils.flop_counter ------------------------------------------------------------------------
def _net(lib):
    nn, functional = lib.nn, lib.nn.functional

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 24)

        def forward(self, x):
            q, k, v = self.proj(x).reshape(2, 5, 3, 8).unbind(2)
            q = q.reshape(2, 5, 2, 4).transpose(1, 2)
            k = k.reshape(2, 5, 2, 4).transpose(1, 2)
            # a value width unlike the query's: torch's CPU takes its math path, whose
            # products it counts (its fused CPU kernel it counts as zero)
            v = v.reshape(2, 5, 1, 8).transpose(1, 2).expand(2, 2, 5, 8)
            return functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1, stride=2)
            self.gconv = nn.Conv2d(4, 4, 3, groups=2, bias=False)
            self.body = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 8, bias=False))
            self.attn = Attention()

        def forward(self, x):
            h = self.gconv(self.conv(x)).flatten(1)
            h = self.body(h).reshape(2, 1, 8).expand(2, 5, 8)
            a = self.attn(h)  # [2, 2, 5, 8]
            ones = lib.ones
            return (
                a.sum()
                + lib.bmm(a.reshape(4, 5, 8), ones(4, 8, 2)).sum()
                + lib.baddbmm(ones(2, 4, 4), ones(2, 4, 3), ones(2, 3, 4)).sum()
                + lib.addmm(ones(5, 2), a.reshape(40, 4)[:5], ones(4, 2)).sum()
                + (a.reshape(2, 20, 4) @ ones(4, 3)).sum()
            )

    lib.manual_seed(0)
    return Net()


def _module_totals(counter):
    return {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items()}


def _op_counts(counter):
    return {
        name: {str(op): n for op, n in ops.items()}
        for name, ops in counter.get_flop_counts().items()
    }


@pytest.mark.parametrize("backward", [False, True])
def test_flop_counter_counts_as_torch_per_module(backward):
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    counts = []
    for lib, mode in ((torch, TorchFlopCounterMode), (rg, FlopCounterMode)):
        net = _net(lib)
        with mode(display=False) as counter:
            loss = net(lib.tensor(x)) * 2.0  # the module's output is not backward's root
            if backward:
                loss.backward()
        counts.append(counter)
    expected, got = counts
    assert _module_totals(got) == _module_totals(expected)
    assert got.get_total_flops() == expected.get_total_flops() > 0


@pytest.mark.parametrize("budget", [256, 4096, 1 << 20])
def test_flop_counter_counts_the_programs_flops_whatever_the_checkpointing_recomputes(budget):
    # values a strategy dropped and recomputes in backward are not the program's FLOPs: the
    # count must not depend on the budget (nor on the timings a budget's plan follows)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((16, 32)).astype(np.float32)
    weights = [rng.standard_normal((32, 32)).astype(np.float32) for _ in range(6)]
    inner = current_backend().inner
    counts = {}
    for name, strategy in (
        ("none", rg.NoCheckpointing()),
        ("budget", rg.BudgetCheckpointing(budget)),
    ):
        with rg.use_backend(rg.Autodiff(inner, strategy)):
            params = [rg.tensor(w).require_grad() for w in weights]
            with FlopCounterMode(display=False) as counter:
                y = rg.tensor(x)
                for w in params:
                    y = (y @ w).tanh()
                grads = y.sum().backward()
            counts[name] = counter.get_total_flops(), grads.recomputed_ops
    # six products forward, six weights' gradients, five inputs' (x needs none): 2mnk each
    assert counts["none"] == (17 * 2 * 16 * 32 * 32, 0)
    assert counts["budget"][0] == counts["none"][0]
    if budget <= 4096:  # (the test means something only where products were recomputed)
        assert counts["budget"][1] >= 6


def test_flop_counter_names_the_ops_of_linear_and_conv_as_torch():
    x = np.random.default_rng(1).standard_normal((2, 3, 6, 6)).astype(np.float32)
    counts = []
    for lib, mode in ((torch, TorchFlopCounterMode), (rg, FlopCounterMode)):
        lib.manual_seed(0)
        net = lib.nn.Sequential(
            lib.nn.Conv2d(3, 2, 3), lib.nn.Flatten(), lib.nn.Linear(32, 5), lib.nn.Linear(5, 3)
        )
        with mode(display=False, depth=1) as counter:
            (net(lib.tensor(x)) * 3.0).sum().backward()
        counts.append(counter)
    assert _op_counts(counts[1]) == _op_counts(counts[0])
    # torch's table, to one level of modules: the top module holds everything
    table = counts[1].get_table(1)
    assert table.splitlines()[0].split() == ["Module", "FLOP", "%", "Total"]
    assert "Sequential" in table and "100.00%" in table and "aten.convolution_backward" in table


def test_flop_counter_leaves_the_backend_as_it_was_and_counts_only_inside():
    backend = current_backend()
    inner = backend.inner if backend.is_autodiff else backend
    before = dict(vars(inner))
    a, b = rg.ones(3, 4), rg.ones(4, 5)
    with FlopCounterMode(display=False) as counter:
        a @ b
    a @ b  # outside: not counted
    assert counter.get_total_flops() == 2 * 3 * 4 * 5
    assert counter.get_flop_counts() == {"Global": {"aten.mm": 120}}
    assert vars(inner) == before
    # a formula of one's own for a kernel torch does not count
    with FlopCounterMode(display=False, custom_mapping={"exp": lambda x: 7}) as counter:
        rg.ones(2).exp()
    assert counter.get_total_flops() == 7
    with pytest.raises(rg.errors.InvalidArgumentError, match="custom_mapping"):
        FlopCounterMode(custom_mapping={torch.ops.aten.mm: lambda *a: 0})


def test_flop_counter_leaves_a_module_when_its_backward_ends():
    # the Linear's input needs no gradient: nothing marks its backward's end but the end of
    # backward itself, after which a product outside any module counts as Global's only
    counts = []
    for lib, mode in ((torch, TorchFlopCounterMode), (rg, FlopCounterMode)):
        lib.manual_seed(0)
        linear = lib.nn.Linear(4, 3)
        with mode(display=False) as counter:
            (linear(lib.ones(2, 4)) * 2.0).sum().backward()
            lib.ones(5, 6) @ lib.ones(6, 7)
        counts.append(counter)
    assert _op_counts(counts[1]) == _op_counts(counts[0])
    assert _op_counts(counts[1])["Global"]["aten.mm"] == 2 * 5 * 6 * 7 + 2 * 3 * 2 * 4


# -- utils.benchmark ---------------------------------------------------------------------------
def _measurements(lib_benchmark, task_spec):
    """The same made-up times (seconds per block), as Measurements of either library."""
    out = []
    for threads in (1, 4):
        for column, scale in (("n=1", 1.0), ("n=8", 37.0)):
            for row, spread in (("float", 0.003), ("int", 0.09)):
                times = [(1.0 + spread * i * i) * 2.3e-6 * scale * 10 for i in range(9)]
                spec = task_spec(
                    "x + 1",
                    "x = torch.ones(n)",
                    label="add",
                    sub_label=row,
                    description=column,
                    num_threads=threads,
                    env="A" if row == "float" else "B",
                )
                out.append(lib_benchmark.Measurement(10, times, spec))
    return out


def test_benchmark_measurement_and_compare_as_torchs():
    import torch.utils.benchmark as torch_benchmark

    import retrograd.utils.benchmark as benchmark

    theirs = _measurements(torch_benchmark, torch_benchmark.utils.common.TaskSpec)
    ours = _measurements(benchmark, benchmark.TaskSpec)
    for m, t in zip(ours, theirs, strict=True):
        assert m.times == pytest.approx(t.times)
        assert (m.median, m.mean, m.iqr) == pytest.approx((t.median, t.mean, t.iqr), rel=1e-12)
        assert m.significant_figures == t.significant_figures
        assert m.has_warnings == t.has_warnings
        # torch's repr, but for its first line (the object's address)
        assert repr(m).splitlines()[1:] == repr(t).splitlines()[1:]
    one = [benchmark.Measurement(1, [2e-3], benchmark.TaskSpec("y = 1\nz = 2", "a = 1"))]
    one_t = [
        torch_benchmark.Measurement(
            1, [2e-3], torch_benchmark.utils.common.TaskSpec("y = 1\nz = 2", "a = 1")
        )
    ]
    assert repr(one[0]).splitlines()[1:] == repr(one_t[0]).splitlines()[1:]
    compare, compare_t = benchmark.Compare(ours), torch_benchmark.Compare(theirs)
    assert str(compare) == str(compare_t)
    for setting in ("trim_significant_figures", "colorize", "highlight_warnings"):
        getattr(compare, setting)()
        getattr(compare_t, setting)()
        assert str(compare) == str(compare_t)
    compare.colorize(rowwise=True)
    compare_t.colorize(rowwise=True)
    assert str(compare) == str(compare_t)
    with pytest.raises(rg.errors.InvalidArgumentError, match="Measurement"):
        benchmark.Compare([1.0])


def test_benchmark_timer_runs_the_statement_with_torch_as_retrograd(capsys):
    import retrograd.utils.benchmark as benchmark

    calls = []
    timer = benchmark.Timer(
        "calls.append(torch.ones(2) @ x)",
        setup="x = torch.ones(2)",
        globals={"calls": calls},
        label="dot",
        description="n=2",
    )
    measurement = timer.timeit(7)
    assert (measurement.number_per_run, len(measurement.raw_times)) == (7, 1)
    assert len(calls) == 7 + 2  # a warm-up of max(number // 100, 2) runs first
    assert float(calls[0]) == 2.0 and isinstance(calls[0], rg.Tensor)
    calls.clear()
    blocked = timer.blocked_autorange(min_run_time=0.002)
    # whole blocks of a power of ten of runs, until min_run_time is spent
    assert blocked.number_per_run in (1, 10, 100, 1000, 10000)
    assert sum(blocked.raw_times) >= 0.002 and len(calls) >= blocked.number_per_run
    adaptive = timer.adaptive_autorange(min_run_time=0.001, max_run_time=0.01)
    assert len(adaptive.raw_times) >= 1
    assert adaptive.median > 0 and adaptive.task_spec.label == "dot"
    benchmark.Compare([blocked, adaptive]).print()
    assert "dot" in capsys.readouterr().out
    with pytest.raises(rg.errors.InvalidArgumentError, match="global_setup"):
        benchmark.Timer("pass", global_setup="#include <x>")
    with pytest.raises(rg.errors.InvalidArgumentError, match="Python"):
        benchmark.Timer("pass", language="c++")


# -- library -----------------------------------------------------------------------------------
def _numpy_sin_op(lib, name):
    """torch's tutorial op: a NumPy kernel with a gradient of its own."""

    def kernel(x, scale=1.0):
        return lib.from_numpy(np.sin(x.detach().numpy()) * scale)

    # (this file's annotations are strings: torch reads real types)
    kernel.__annotations__ = {"x": lib.Tensor, "scale": float, "return": lib.Tensor}
    numpy_sin = lib.library.custom_op(f"modules2::{name}", kernel, mutates_args=())

    seen = {}

    def setup_context(ctx, inputs, output):
        seen["inputs"] = len(inputs)
        seen["needs"] = tuple(ctx.needs_input_grad)
        ctx.save_for_backward(inputs[0])
        ctx.scale = inputs[1]

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos() * ctx.scale, None

    numpy_sin.register_autograd(backward, setup_context=setup_context)

    @numpy_sin.register_fake
    def _(x, scale=1.0):
        return lib.empty_like(x)

    return numpy_sin, seen


def test_custom_op_runs_its_kernel_and_its_registered_gradient_as_torchs():
    values = np.array([0.5, 1.0, -2.0], dtype=np.float64)
    results = []
    for lib, name in ((torch, "sin_t"), (rg, "sin_rg")):
        op, seen = _numpy_sin_op(lib, name)
        x = lib.tensor(values, requires_grad=True)
        out = getattr(lib.ops.modules2, name)(x, scale=3.0)  # by name, a keyword too
        grads = (out * lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64)).sum().backward()
        grad = x.grad if lib is torch else x.grad(grads)
        results.append((out.detach().numpy(), grad.numpy(), dict(seen)))
        assert repr(op) == f"<CustomOpDef(modules2::{name})>"
    # torch's opcheck would compile (seconds): retrograd's runs the eager tests only
    assert rg.library.opcheck(op, (x, 2.0)) == {
        "test_schema": "SUCCESS",
        "test_autograd_registration": "SUCCESS",
        "test_faketensor": "SUCCESS",
    }
    (out_t, grad_t, seen_t), (out_r, grad_r, seen_r) = results
    np.testing.assert_allclose(out_r, out_t, rtol=1e-15)
    np.testing.assert_allclose(grad_r, grad_t, rtol=1e-15)
    # (torch's ctx.needs_input_grad has one more entry, for an argument of its own)
    assert (
        seen_r
        == {"inputs": 2, "needs": seen_t["needs"][:2]}
        == {"inputs": 2, "needs": (True, False)}
    )


def test_custom_op_refusals_and_kernels_by_device():
    @rg.library.custom_op("modules2::plain", mutates_args=())
    def plain(x: rg.Tensor) -> rg.Tensor:
        return x * 2

    x = rg.ones(2, requires_grad=True)
    with pytest.raises(rg.errors.AutodiffError, match="no autograd formula was registered"):
        plain(x).sum().backward()
    assert float(plain(rg.ones(2)).sum()) == 4.0  # without gradients it just runs
    plain.register_kernel("cpu", lambda x: x * 5)
    assert float(plain(rg.ones(2)).sum()) == 10.0
    with pytest.raises(rg.errors.InvalidArgumentError, match="type annotation"):
        rg.library.custom_op("modules2::bare", lambda x: x, mutates_args=())
    with pytest.raises(rg.errors.InvalidArgumentError, match="namespace::name"):
        rg.library.custom_op("bare", mutates_args=())
    with pytest.raises(TypeError, match="mutates_args"):
        rg.library.custom_op("modules2::no_mutates")

    @rg.library.custom_op("modules2::same", mutates_args=())
    def same(x: rg.Tensor) -> rg.Tensor:
        return x

    with pytest.raises(rg.errors.InvalidArgumentError, match="must not also be an input"):
        same(rg.ones(2))

    @rg.library.custom_op("modules2::writes", mutates_args=())
    def writes(x: rg.Tensor) -> rg.Tensor:
        x.add_(1.0)
        return x.clone()

    with pytest.raises(rg.errors.InvalidArgumentError, match="not in mutates_args"):
        rg.library.opcheck(writes, (rg.zeros(2),), test_utils="test_schema")
    # the low-level API: define, then a composite kernel differentiated through its ops
    lib = rg.library.Library("modules2low", "DEF")
    lib.define("cube(Tensor x) -> Tensor")
    lib.impl("cube", lambda x: x * x * x, "CompositeImplicitAutograd")
    y = rg.tensor([2.0], requires_grad=True)
    assert y.grad(rg.ops.modules2low.cube(y).sum().backward()).tolist() == [12.0]
    with pytest.raises(rg.errors.InvalidArgumentError, match="ATen"):
        rg.library.Library("aten", "IMPL")


# -- distributed.elastic.multiprocessing.errors --------------------------------------------------
def _failing_main():
    raise ValueError("bad batch 7")


def test_record_writes_torchs_error_file_and_reraises(tmp_path, monkeypatch):
    import json

    from torch.distributed.elastic.multiprocessing import errors as torch_errors

    from retrograd.distributed.elastic.multiprocessing import errors

    written = {}
    for name, module in (("torch", torch_errors), ("rg", errors)):
        path = tmp_path / f"{name}.json"
        monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
        with pytest.raises(ValueError, match="bad batch 7"):
            module.record(_failing_main)()
        written[name] = json.loads(path.read_text())
    theirs, ours = written["torch"]["message"], written["rg"]["message"]
    assert ours["message"] == theirs["message"] == "ValueError: bad batch 7"
    assert set(ours["extraInfo"]) == set(theirs["extraInfo"]) == {"py_callstack", "timestamp"}
    assert "_failing_main" in ours["extraInfo"]["py_callstack"]
    assert abs(int(ours["extraInfo"]["timestamp"]) - int(theirs["extraInfo"]["timestamp"])) < 60
    # SystemExit(0) is a clean end; the decorated function's result comes back
    assert errors.record(lambda: (_ for _ in ()).throw(SystemExit(0)))() is None
    assert errors.record(lambda x: x + 1)(1) == 2
    # a launcher's report from the worker's file, in torch's words
    failure = errors.ProcessFailure(0, 123, 1, str(tmp_path / "rg.json"))
    torch_failure = torch_errors.ProcessFailure(0, 123, 1, str(tmp_path / "rg.json"))
    report = errors.ChildFailedError("train.py", {0: failure})
    assert str(report) == str(torch_errors.ChildFailedError("train.py", {0: torch_failure}))
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / "parent.json"))
    with pytest.raises(errors.ChildFailedError):
        errors.record(lambda: (_ for _ in ()).throw(report))()
    parent = json.loads((tmp_path / "parent.json").read_text())
    assert parent["message"]["errorCode"] == 1
    assert parent["message"]["message"] == "ValueError: bad batch 7"


# -- distributed.checkpoint -------------------------------------------------------------------
def _trained(lib, seed):
    lib.manual_seed(seed)
    model = lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.ReLU(), lib.nn.Linear(4, 2))
    optimizer = lib.optim.AdamW(model.parameters(), lr=0.1)
    return model, optimizer


def test_dcp_state_dict_helpers_name_parameters_as_torchs():
    import torch.distributed.checkpoint.state_dict as torch_sd

    from retrograd.distributed.checkpoint import state_dict as sd

    ours = sd.get_state_dict(*_trained(rg, 0))
    theirs = torch_sd.get_state_dict(*_trained(torch, 0))
    assert list(ours[0]) == list(theirs[0])
    # a fresh optimizer's state exists already (torch steps it once at learning rate 0)
    assert (
        list(ours[1]["state"])
        == list(theirs[1]["state"])
        == ["0.weight", "0.bias", "2.weight", "2.bias"]
    )
    assert {k: set(v) for k, v in ours[1]["state"].items()} == {
        k: set(v) for k, v in theirs[1]["state"].items()
    }
    strip = [{k: v for k, v in g.items() if k != "params"} for g in theirs[1]["param_groups"]]
    assert [g["params"] for g in ours[1]["param_groups"]] == [
        g["params"] for g in theirs[1]["param_groups"]
    ]
    assert set(ours[1]["param_groups"][0]) <= set(theirs[1]["param_groups"][0]) | {"params"}
    assert ours[1]["param_groups"][0]["lr"] == strip[0]["lr"] == 0.1
    flat = sd.get_optimizer_state_dict(
        *_trained(rg, 0), options=sd.StateDictOptions(flatten_optimizer_state_dict=True)
    )
    flat_t = torch_sd.get_optimizer_state_dict(
        *_trained(torch, 0), options=torch_sd.StateDictOptions(flatten_optimizer_state_dict=True)
    )
    assert {k for k in flat if k.startswith("state.")} == {
        k for k in flat_t if k.startswith("state.")
    }


def test_dcp_save_then_load_in_place_resumes_model_and_optimizer(tmp_path):
    import retrograd.distributed.checkpoint as dcp
    from retrograd.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model, optimizer = _trained(rg, 0)
    optimizer.step(model(rg.ones(5, 3)).sum().backward())
    model_sd, optim_sd = get_state_dict(model, optimizer)
    expected_params = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
    expected_state = optimizer.state_dict()["state"]
    dcp.save(
        {"model": model_sd, "optim": optim_sd, "meta": {"epoch": 3, "shape": (2, 3)}},
        checkpoint_id=tmp_path / "step3",
    )
    fresh, fresh_optimizer = _trained(rg, 1)
    model_sd, optim_sd = get_state_dict(fresh, fresh_optimizer)
    state = {"model": model_sd, "optim": optim_sd, "meta": {"epoch": 0, "shape": None}}
    dcp.load(state, checkpoint_id=tmp_path / "step3")
    assert state["model"] is model_sd and state["meta"] == {"epoch": 3, "shape": (2, 3)}
    # in place: the model's own state values wrote through, as torch's shared storage does
    for name, param in fresh.named_parameters():
        np.testing.assert_array_equal(param.detach().numpy(), expected_params[name])
    set_state_dict(fresh, fresh_optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd)
    loaded = fresh_optimizer.state_dict()["state"]
    for number, entry in expected_state.items():
        for key, value in entry.items():
            np.testing.assert_array_equal(np.asarray(loaded[number][key]), np.asarray(value))
    # the two models now step alike
    optimizer.step(model(rg.ones(5, 3)).sum().backward())
    fresh_optimizer.step(fresh(rg.ones(5, 3)).sum().backward())
    for (_, a), (_, b) in zip(model.named_parameters(), fresh.named_parameters(), strict=True):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


def test_dcp_loads_stateful_objects_and_refuses_what_it_cannot(tmp_path):
    import retrograd.distributed.checkpoint as dcp

    class App:
        def __init__(self, value):
            self.value = value

        def state_dict(self):
            return {"w": self.value}

        def load_state_dict(self, state):
            self.value = state["w"]

    dcp.save({"app": App(rg.tensor([1.0, 2.0]))}, storage_writer=dcp.FileSystemWriter(tmp_path))
    target = App(rg.zeros(2))
    dcp.load({"app": target}, storage_reader=dcp.FileSystemReader(tmp_path))
    assert target.value.tolist() == [1.0, 2.0]
    with pytest.raises(
        rg.errors.KeyMismatchError, match=r"Missing key in checkpoint state_dict: app\.b"
    ):
        dcp.load({"app": {"w": rg.zeros(2), "b": rg.zeros(1)}}, checkpoint_id=tmp_path)
    with pytest.raises(rg.errors.ShapeError, match=r"app.w.*\[2\].*\[3\]"):
        dcp.load({"app": {"w": rg.zeros(3)}}, checkpoint_id=tmp_path)
    with pytest.raises(rg.errors.DTypeError, match="object"):
        dcp.save({"x": object()}, checkpoint_id=tmp_path / "other")
    assert not (tmp_path / "other" / ".metadata").exists()  # nothing half-written
    with pytest.raises(rg.errors.InvalidArgumentError, match="holds no checkpoint"):
        dcp.load({"x": rg.zeros(1)}, checkpoint_id=tmp_path / "missing")


# -- export, fsdp, tensor: refused by name ------------------------------------------------------
def test_export_fsdp_and_dtensor_are_refused_by_name_with_torchs_option_types():
    import torch.distributed.fsdp as torch_fsdp

    import retrograd.distributed.device_mesh as device_mesh
    import retrograd.distributed.fsdp as fsdp
    import retrograd.distributed.tensor as dtensor
    import retrograd.export

    for ours, theirs in ((fsdp.ShardingStrategy, torch_fsdp.ShardingStrategy),
                         (fsdp.StateDictType, torch_fsdp.StateDictType),
                         (fsdp.BackwardPrefetch, torch_fsdp.BackwardPrefetch)):  # fmt: skip
        assert [(e.name, e.value) for e in ours] == [(e.name, e.value) for e in theirs]
    policy = fsdp.MixedPrecision(param_dtype=rg.bfloat16)
    assert policy.reduce_dtype is None and policy.cast_root_forward_inputs is True
    model = rg.nn.Linear(2, 2)
    refused = [
        lambda: fsdp.FullyShardedDataParallel(
            model, sharding_strategy=fsdp.ShardingStrategy.FULL_SHARD
        ),
        lambda: fsdp.fully_shard(model),
        lambda: device_mesh.init_device_mesh("cpu", (2,)),
        lambda: dtensor.distribute_tensor(rg.ones(2), None, [dtensor.Shard(0)]),
    ]
    for call in refused:
        with pytest.raises(rg.errors.DistributedError, match="DistributedDataParallel"):
            call()
    with pytest.raises(rg.errors.InvalidArgumentError, match=r"torch\.export"):
        retrograd.export.export(model, (rg.ones(1, 2),))
    assert retrograd.export.Dim("batch", min=1, max=8).max == 8


def test_flop_counter_module_returning_the_loss_as_torchs():
    # torch does not enter, in backward, a module whose output is backward's root (its
    # multi-grad hook does not fire there): the module keeps its forward count only
    counts = []
    for lib, mode in ((torch, TorchFlopCounterMode), (rg, FlopCounterMode)):
        lib.manual_seed(0)

        class Loss(lib.nn.Module):
            def __init__(self, fc):
                super().__init__()
                self.fc = fc

            def forward(self, x):
                return self.fc(x).sum()

        with mode(display=False) as counter:
            Loss(lib.nn.Linear(3, 3))(lib.ones(2, 3)).backward()
        counts.append(_op_counts(counter))
    assert counts[1] == counts[0]
    assert counts[1]["Loss"] == {"aten.addmm": 36}
