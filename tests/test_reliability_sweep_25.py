"""Reliability sweep 25: today's surfaces (``rg.stft``, ``_foreach_*``, ``scatter_reduce``,
``as_strided`` over storage, uint8/int32 tensors, nested backwards, duplicate optimizer
parameters) fed bad and edge inputs, each case run through torch 2.13 and retrograd with the
same code: where torch raises, retrograd raises an error of API.md section 7's hierarchy
naming the op; where torch accepts, retrograd gives torch's value. Then the new dtypes through
the product paths (save/load, state_dict, dtype casts of modules, checkpointing strategies,
``rg.capture``, DDP on threads)."""

import os
import tempfile
import threading
import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd import distributed as dist
from retrograd import nn, optim
from retrograd.nn.parallel import DistributedDataParallel as DDP  # noqa: N817

SIGNAL = np.random.default_rng(250).standard_normal(16).astype(np.float32)
GRID = np.arange(12, dtype=np.float32).reshape(3, 4)


def _pair(lib):
    return [lib.tensor([1.0, -2.0, 0.0, 4.0]), lib.tensor([[3.0, 0.5], [-1.0, 2.0]])]


def _stft(**kwargs):
    return lambda lib: lib.stft(lib.tensor(SIGNAL), **kwargs)


def _scatter(index, reduce, include_self=True, base=(0.0, 0.0, 0.0), src=(1.0, 2.0, 3.0, 4.0)):
    def call(lib):
        return lib.tensor(list(base)).scatter_reduce(
            0, lib.tensor(index, dtype=lib.int64), lib.tensor(list(src)), reduce,
            include_self=include_self,
        )  # fmt: skip

    return call


def _strided(size, stride, offset=None, transposed=False):
    def call(lib):
        x = lib.tensor(GRID)
        x = x.t() if transposed else x
        return x.as_strided(size, stride) if offset is None else x.as_strided(size, stride, offset)

    return call


def _typed(dtype, values, then):
    return lambda lib: then(lib, lib.tensor(values, dtype=getattr(lib, dtype)))


CASES = {
    # stft: sizes, keywords, inputs
    "stft n_fft=0": _stft(n_fft=0, return_complex=False),
    "stft n_fft<0": _stft(n_fft=-4, return_complex=False),
    "stft n_fft huge": _stft(n_fft=1000, return_complex=False),
    "stft n_fft past the end": _stft(n_fft=17, center=False, return_complex=False),
    "stft n_fft float": _stft(n_fft=8.0, return_complex=False),
    "stft n_fft None": _stft(n_fft=None, return_complex=False),
    "stft hop 0": _stft(n_fft=8, hop_length=0, return_complex=False),
    "stft hop past the end": _stft(n_fft=8, hop_length=100, return_complex=False),
    "stft win_length 0": _stft(n_fft=8, win_length=0, return_complex=False),
    "stft win_length > n_fft": _stft(n_fft=8, win_length=9, return_complex=False),
    "stft win_length 3": _stft(n_fft=8, win_length=3, return_complex=False),
    "stft bad pad_mode": _stft(n_fft=8, pad_mode="foo", return_complex=False),
    "stft reflect too wide": _stft(n_fft=40, return_complex=False),
    "stft circular too wide": _stft(n_fft=40, pad_mode="circular", return_complex=False),
    "stft constant wide": _stft(n_fft=40, pad_mode="constant", return_complex=False),
    "stft two-sided normalized": _stft(
        n_fft=6, onesided=False, normalized=True, return_complex=False
    ),
    "stft return_complex str": _stft(n_fft=8, return_complex="no"),
    "stft return_complex 0": _stft(n_fft=8, return_complex=0),
    "stft unknown keyword": _stft(n_fft=8, bogus=1, return_complex=False),
    "stft 3-d input": lambda lib: lib.stft(lib.ones(2, 2, 16), 8, return_complex=False),
    "stft int input": lambda lib: lib.stft(lib.arange(16), 8, return_complex=False),
    "stft None input": lambda lib: lib.stft(None, 8, return_complex=False),
    "stft window of 5": lambda lib: lib.stft(
        lib.tensor(SIGNAL), 8, window=lib.ones(5), return_complex=False
    ),
    "stft 2-d window": lambda lib: lib.stft(
        lib.tensor(SIGNAL), 8, window=lib.ones(8, 1), return_complex=False
    ),
    "stft float64 window": lambda lib: lib.stft(
        lib.tensor(SIGNAL), 8, window=lib.tensor(np.hanning(8)), return_complex=False
    ),
    "stft list window": lambda lib: lib.stft(
        lib.tensor(SIGNAL), 8, window=[1.0] * 8, return_complex=False
    ),
    # _foreach_*: lists, lengths, operands, keywords
    "foreach add empty": lambda lib: lib._foreach_add([], 1.0),
    "foreach exp_ empty": lambda lib: lib._foreach_exp_([]),
    "foreach norm empty": lambda lib: lib._foreach_norm([]),
    "foreach add None": lambda lib: lib._foreach_add(None, 1.0),
    "foreach add tensor not list": lambda lib: lib._foreach_add(lib.ones(2), 1.0),
    "foreach add other None": lambda lib: lib._foreach_add(_pair(lib), None),
    "foreach add short scalars": lambda lib: lib._foreach_add(_pair(lib), [1.0]),
    "foreach add short tensors": lambda lib: lib._foreach_add(_pair(lib), _pair(lib)[:1]),
    "foreach add shapes crossed": lambda lib: lib._foreach_add(_pair(lib), _pair(lib)[::-1]),
    "foreach add scalars": lambda lib: lib._foreach_add(_pair(lib), [1.0, 2.0]),
    "foreach add alpha": lambda lib: lib._foreach_add(_pair(lib), _pair(lib), alpha=2),
    "foreach add scalar alpha": lambda lib: lib._foreach_add(_pair(lib), 2.0, alpha=3),
    "foreach mul 0-d tensor": lambda lib: lib._foreach_mul(_pair(lib), lib.tensor(3.0)),
    "foreach mul unknown keyword": lambda lib: lib._foreach_mul(_pair(lib), 2, foo=1),
    "foreach div by zero": lambda lib: lib._foreach_div(_pair(lib), 0.0),
    "foreach sqrt nan inf": lambda lib: lib._foreach_sqrt([lib.tensor([-1.0, np.nan, np.inf])]),
    "foreach exp_ int": lambda lib: lib._foreach_exp_([lib.tensor([1, 2])]),
    "foreach pow scalar base": lambda lib: lib._foreach_pow(2.0, _pair(lib)),
    "foreach pow list": lambda lib: lib._foreach_pow(_pair(lib), [2, 3]),
    "foreach maximum scalar": lambda lib: lib._foreach_maximum(_pair(lib), 0.5),
    "foreach clamp_min scalars": lambda lib: lib._foreach_clamp_min(_pair(lib), [0.5, 1.0]),
    "foreach addcdiv scalars": lambda lib: lib._foreach_addcdiv(
        _pair(lib), _pair(lib), _pair(lib), [0.5, 2.0]
    ),
    "foreach addcmul short scalars": lambda lib: lib._foreach_addcmul(
        _pair(lib), _pair(lib), _pair(lib), [0.5]
    ),
    "foreach addcmul long scalars tensor": lambda lib: lib._foreach_addcmul(
        _pair(lib), _pair(lib), _pair(lib), lib.tensor([0.5, 2.0, 3.0])
    ),
    "foreach addcmul 2-d scalars tensor": lambda lib: lib._foreach_addcmul(
        _pair(lib), _pair(lib), _pair(lib), lib.tensor([[0.5, 2.0]])
    ),
    "foreach addcmul str value": lambda lib: lib._foreach_addcmul(
        _pair(lib), _pair(lib), _pair(lib), value="a"
    ),
    "foreach lerp short ends": lambda lib: lib._foreach_lerp(_pair(lib), _pair(lib)[:1], 0.5),
    "foreach lerp weights": lambda lib: lib._foreach_lerp(_pair(lib), _pair(lib), _pair(lib)),
    "foreach copy_ short": lambda lib: lib._foreach_copy_(_pair(lib), _pair(lib)[:1]),
    "foreach norm inf": lambda lib: lib._foreach_norm(_pair(lib), float("inf")),
    "foreach norm 0": lambda lib: lib._foreach_norm(_pair(lib), 0),
    "foreach norm float64": lambda lib: lib._foreach_norm(_pair(lib), 2, dtype=lib.float64),
    "foreach uint8 add 300": lambda lib: lib._foreach_add([lib.tensor([1], dtype=lib.uint8)], 300),
    "foreach int32 div_": lambda lib: lib._foreach_div_([lib.tensor([3], dtype=lib.int32)], 2),
    # scatter_reduce
    "scatter_reduce prod": _scatter([0, 1, 0, 2], "prod"),
    "scatter_reduce mean without self": _scatter([0, 1, 0, 2], "mean", False),
    "scatter_reduce amin without self": _scatter([0, 0, 0, 0], "amin", False),
    "scatter_reduce index past the end": _scatter([0, 1, 0, 5], "sum"),
    "scatter_reduce index negative": _scatter([0, 1, 0, -1], "sum"),
    "scatter_reduce index longer": _scatter([0, 1, 0, 2, 1], "sum"),
    "scatter_reduce unknown reduce": _scatter([0, 1, 0, 2], "maxx"),
    "scatter_reduce reduce None": _scatter([0, 1, 0, 2], None),
    "scatter_reduce include_self str": _scatter([0, 1, 0, 2], "sum", "no"),
    "scatter_reduce amax nan inf": _scatter([0, 0, 1, 1], "amax", src=(np.nan, 1, 2, np.inf)),
    # as_strided over storage
    "as_strided negative size": _strided((-1, 2), (1, 1)),
    "as_strided negative stride": _strided((2, 2), (-1, 1)),
    "as_strided past the storage": _strided((5, 5), (4, 1)),
    "as_strided huge": _strided((10**12,), (1,)),
    "as_strided negative offset": _strided((2,), (1,), -1),
    "as_strided lengths differ": _strided((2, 2), (1,)),
    "as_strided stride None": _strided((2, 2), None),
    "as_strided of a transpose": _strided((2, 2), (1, 2), None, True),
    "as_strided of a transpose at 3": _strided((2, 2), (1, 2), 3, True),
    "as_strided zero strides": _strided((3, 3), (0, 0)),
    "as_strided empty": _strided((0, 3), (1, 1)),
    # uint8 / int32
    "uint8 wraps": lambda lib: lib.tensor([-1, 256, 1000]).to(lib.uint8),
    "int32 from floats": lambda lib: lib.tensor([1.5, -2.7]).to(lib.int32),
    "uint8 requires_grad": lambda lib: lib.tensor([1], dtype=lib.uint8, requires_grad=True),
    "int32 floor-divide by 0": _typed("int32", [7], lambda lib, t: t // lib.zeros_like(t)),
    "uint8 remainder by 0": _typed("uint8", [7], lambda lib, t: t % 0),
    "uint8 max of nothing": lambda lib: lib.zeros(0, dtype=lib.uint8).max(),
    "int32 full out of range": lambda lib: lib.full((2,), 2**40, dtype=lib.int32),
    "uint8 full -1": lambda lib: lib.full((2,), -1, dtype=lib.uint8),
    "int32 pow -1": _typed("int32", [2], lambda lib, t: t**-1),
    "uint8 cumsum": _typed("uint8", [200, 100], lambda lib, t: t.cumsum(0)),
    "uint8 sum as uint8": _typed("uint8", [200, 100], lambda lib, t: t.sum(dtype=lib.uint8)),
    "uint8 mean": _typed("uint8", [1, 3], lambda lib, t: t.mean()),
    "int32 index": _typed("int32", [1, 3], lambda lib, t: lib.arange(5)[t]),
    "uint8 index": _typed("uint8", [1, 0, 1, 0, 1], lambda lib, t: lib.arange(5)[t]),
    "int32 past the end": _typed("int32", [1, 9], lambda lib, t: lib.arange(5)[t]),
    "uint8 cat int64": _typed("uint8", [1], lambda lib, t: lib.cat([t, lib.tensor([300])])),
    "int32 cat float": _typed("int32", [1], lambda lib, t: lib.cat([t, lib.tensor([1.5])])),
    "uint8 neg": _typed("uint8", [1, 3], lambda lib, t: -t),
    "uint8 shift": _typed("uint8", [1, 3], lambda lib, t: t << 9),
    "int32 matmul": _typed("int32", [[1, 2], [3, 4]], lambda lib, t: t @ t),
    "uint8 arange from -2": lambda lib: lib.arange(-2, 3, dtype=lib.uint8),
    "uint8 randint past 255": lambda lib: lib.randint(0, 300, (3,), dtype=lib.uint8),
    "int32 randint below": lambda lib: lib.randint(-(2**31) - 1, 0, (3,), dtype=lib.int32),
    "uint8 random_ past 255": lambda lib: lib.zeros(3, dtype=lib.uint8).random_(0, 300),
    "uint8 new_full -1": _typed("uint8", [1], lambda lib, t: t.new_full((2,), -1)),
    "int32 new_tensor too big": _typed("int32", [1], lambda lib, t: t.new_tensor([2**40])),
    "uint8 linspace from -2": lambda lib: lib.linspace(-2, 3, 6, dtype=lib.uint8),
    "uint8 linspace to 300": lambda lib: lib.linspace(0, 300, 3, dtype=lib.uint8),
    "uint8 logspace from -2": lambda lib: lib.logspace(-2, 3, 3, base=2, dtype=lib.uint8),
    "int32 one_hot": _typed("int32", [1, 2], lambda lib, t: lib.nn.functional.one_hot(t)),
}


def _numpy(value):
    if isinstance(value, list | tuple):
        return [_numpy(v) for v in value]
    if isinstance(value, torch.Tensor):
        return value.detach().numpy()
    return value.numpy() if isinstance(value, rg.Tensor) else value


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_and_edge_inputs_are_refused_or_computed_as_torch(name):
    call = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected = _numpy(call(torch))
        except Exception:  # torch refuses it: retrograd must refuse it in its hierarchy
            with pytest.raises(rg.RetrogradError):
                call(rg)
            return
        got = _numpy(call(rg))
    expected_list = expected if isinstance(expected, list) else [expected]
    got_list = got if isinstance(got, list) else [got]
    assert len(got_list) == len(expected_list)
    for g, e in zip(got_list, expected_list):
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, g.dtype, e.shape, e.dtype)
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_a_refused_call_leaves_tensors_and_an_earlier_graph_usable():
    signal = rg.tensor(SIGNAL, requires_grad=True)
    window = rg.tensor(np.hanning(8).astype(np.float32), requires_grad=True)
    loss = rg.stft(signal, 8, window=window, return_complex=False).square().sum()
    params = _pair(rg)
    for bad in (
        lambda: rg.stft(signal, 0, return_complex=False),
        lambda: rg.stft(signal, 8, window=rg.ones(5), return_complex=False),
        lambda: rg._foreach_add_(params, [rg.ones(4), rg.ones(3)]),
        lambda: rg._foreach_mul_(params, 2, foo=1),
        lambda: signal.detach().as_strided((5, 5), (4, 1)),
        lambda: rg.zeros(3).scatter_reduce(0, rg.tensor([0, 7]), rg.ones(2), "sum"),
    ):
        with pytest.raises(rg.RetrogradError):
            bad()
    grads = loss.backward()
    t_signal = torch.tensor(SIGNAL, requires_grad=True)
    t_window = torch.tensor(np.hanning(8).astype(np.float32), requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.stft(t_signal, 8, window=t_window, return_complex=False).square().sum().backward()
    np.testing.assert_allclose(signal.grad(grads).numpy(), t_signal.grad.numpy(), rtol=1e-4)
    np.testing.assert_allclose(window.grad(grads).numpy(), t_window.grad.numpy(), rtol=1e-4)
    # the first tensor of the refused in-place call was written before the second failed, as
    # in torch's; both stay usable
    theirs = _pair(torch)
    with pytest.raises(RuntimeError):
        torch._foreach_add_(theirs, [torch.ones(4), torch.ones(3)])
    torch._foreach_mul_(theirs, 2.0)
    rg._foreach_mul_(params, 2.0)
    for got, expected in zip(params, theirs):
        np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_a_nested_backward_that_fails_leaves_later_backwards_accumulating():
    def run(lib, fail):
        w = lib.tensor([1.0, 2.0], requires_grad=True)

        class Recompute(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                with lib.enable_grad():
                    inner = (w * 3).sum()
                lib.autograd.backward(inner.detach() if fail else inner)
                return grad * 2

        x = lib.tensor([1.0, 1.0], requires_grad=True)
        grads = Recompute.apply(x).sum().backward()
        return (w.grad, x.grad) if lib is torch else (w.grad(grads), x.grad(grads))

    with pytest.raises(RuntimeError):
        run(torch, True)
    with pytest.raises(rg.AutodiffError):
        run(rg, True)
    for got, expected in zip(run(rg, False), run(torch, False)):
        np.testing.assert_array_equal(got.numpy(), expected.numpy())


@pytest.mark.parametrize(
    "name, options",
    [("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.1}),
     ("Adam", {"lr": 0.1, "amsgrad": True}), ("RMSprop", {"lr": 0.01}), ("Adagrad", {"lr": 0.1})],
)  # fmt: skip
def test_a_parameter_listed_twice_is_stepped_twice_as_torch(name, options):
    start = np.array([1.0, -2.0, 3.0], np.float32)

    def run(lib):
        w = lib.tensor(start, requires_grad=True)
        v = lib.tensor(start * 0.5, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opt = getattr(lib.optim, name)([w, v, w], **options)
        for _ in range(3):
            loss = (w**2).sum() + (v * w).sum()
            if lib is torch:
                opt.zero_grad()
                loss.backward()
                opt.step()
            else:
                opt.step(loss.backward())
        return _numpy(w), _numpy(v)

    for got, expected in zip(run(rg), run(torch)):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


class _Masked(nn.Module):
    """A model with a uint8 mask buffer and int32 index buffer, as GPT-2's ported code."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("mask", rg.tril(rg.ones(3, 3, dtype=rg.uint8)))
        self.register_buffer("order", rg.tensor([2, 0, 1], dtype=rg.int32))

    def forward(self, x):
        y = self.lin(x).masked_fill(self.mask == 0, 0.0)[:, self.order] * self.mask
        return y.index_select(1, self.order).square().sum()


def test_uint8_and_int32_buffers_survive_save_load_state_dict_and_dtype_casts():
    rg.manual_seed(0)
    model = _Masked()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.rg")
        rg.save(model.state_dict(), path)
        loaded = rg.load(path)
    assert loaded["mask"].dtype == rg.uint8 and loaded["order"].dtype == rg.int32
    other = _Masked().double()  # torch's .double() casts floating tensors only
    assert other.mask.dtype == rg.uint8 and other.order.dtype == rg.int32
    assert other.lin.weight.dtype == rg.float64
    other = other.to(rg.float32)
    other.load_state_dict(loaded)
    assert other.mask.dtype == rg.uint8 and other.order.dtype == rg.int32
    assert other.mask.tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    assert other.order.tolist() == [2, 0, 1]
    x = rg.tensor(np.random.default_rng(1).standard_normal((3, 3)).astype(np.float32))
    np.testing.assert_array_equal(other(x).numpy(), model(x).numpy())


def _train(batches, strategy=None, captured=False):
    rg.manual_seed(0)
    model = _Masked()
    opt = optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        loss = model(x)
        opt.step(loss.backward())
        return loss

    if captured:
        run = rg.capture(step, batches[0], state=[opt])
        losses = [run.result.item()] + [run(x).item() for x in batches[1:]]
    elif strategy is not None:
        with rg.use_backend(rg.Autodiff(rg.current_backend().inner, checkpointing=strategy)):
            losses = [step(x).item() for x in batches]
    else:
        losses = [step(x).item() for x in batches]
    return losses, model.lin.weight.numpy()


@pytest.mark.parametrize("how", ["budget", "balanced", "capture"])
def test_a_step_with_uint8_masks_and_int32_indices_is_the_eager_one(how):
    rng = np.random.default_rng(2)
    batches = [rg.tensor(rng.standard_normal((3, 3)).astype(np.float32)) for _ in range(3)]
    expected = _train(batches)
    if how == "capture":
        got = _train(batches, captured=True)
    else:
        strategy = rg.BudgetCheckpointing("100B") if how == "budget" else rg.BalancedCheckpointing()
        got = _train(batches, strategy)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-6)


def test_ddp_on_threads_broadcasts_a_uint8_buffer_and_keeps_its_dtype():
    data = [
        np.random.default_rng(10 + r).standard_normal((3, 3)).astype(np.float32) for r in range(2)
    ]
    results: list = [None, None]

    def script(rank):
        rg.manual_seed(0)
        model = _Masked()
        if rank == 1:
            with rg.no_grad():
                model.mask.fill_(1)  # rank 0's buffer is broadcast over it
        ddp = DDP(model, broadcast_buffers=True)
        opt = optim.SGD(ddp.parameters(), lr=0.1)
        opt.step(ddp(rg.tensor(data[rank])).backward())
        return model.mask.dtype, model.mask.tolist(), model.lin.weight.numpy()

    devices = [rg.Device("cpu", i) for i in range(2)]
    config = dist.DistributedConfig(all_reduce_op=dist.ReduceOperation.MEAN, timeout=10.0)
    with dist.DistributedContext(devices, config) as ctx:

        def run(rank):
            try:
                dist.init_process_group("gloo", rank=rank, world_size=2, store=ctx)
                try:
                    results[rank] = script(rank)
                finally:
                    dist.destroy_process_group()
            except BaseException as error:  # handed back to the test
                results[rank] = error

        threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30.0)
            assert not thread.is_alive(), "a rank thread hung"
    for result in results:
        if isinstance(result, BaseException):
            raise result
    for dtype, mask, _ in results:
        assert dtype == rg.uint8 and mask == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    np.testing.assert_array_equal(results[0][2], results[1][2])
