"""torch's surface beyond tensors and modules (API.md section 10), each name against torch:
import paths (``nn.modules.activation.MultiheadAttention``, ``NonDynamicallyQuantizableLinear``),
``nn.attention`` (``SDPBackend``, ``sdpa_kernel``), memory formats, the default device and
autocast queries, ``torch.futures``; and the clear errors where a torch form cannot hold."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd import nn
from retrograd.nn import functional as F  # noqa: N812

RNG = np.random.default_rng(29)


# -- import paths --------------------------------------------------------------------------------
def test_multihead_attention_at_torchs_module_paths():
    assert rg.nn.modules.activation.MultiheadAttention is nn.MultiheadAttention
    theirs, ours = torch.nn.MultiheadAttention(8, 2), nn.MultiheadAttention(8, 2)
    assert type(ours.out_proj).__name__ == type(theirs.out_proj).__name__
    assert isinstance(ours.out_proj, nn.Linear) and isinstance(theirs.out_proj, torch.nn.Linear)
    layer = rg.nn.modules.linear.NonDynamicallyQuantizableLinear(4, 3, bias=False)
    reference = torch.nn.modules.linear.NonDynamicallyQuantizableLinear(4, 3, bias=False)
    assert list(layer.state_dict()) == list(reference.state_dict()) == ["weight"]
    layer.double().load_state_dict({"weight": reference.weight.detach().double().numpy()})
    x = RNG.standard_normal((2, 4))
    expected = reference.double()(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(layer(rg.tensor(x)).numpy(), expected, rtol=1e-12)


# -- nn.attention ---------------------------------------------------------------------------------
def test_sdp_backends_have_torchs_names_and_values():
    from torch.nn.attention import SDPBackend as Theirs

    from retrograd.nn.attention import SDPBackend

    assert [(b.name, b.value) for b in SDPBackend] == [
        (name, int(member.value)) for name, member in Theirs.__members__.items()
    ]


@pytest.mark.parametrize("kernel", ["MATH", "FLASH_ATTENTION", "both"])
def test_sdpa_kernel_selects_and_computes_torchs_attention(kernel):
    from torch.nn import attention as theirs

    from retrograd.nn import attention as ours

    def chosen(lib):
        kinds = ["MATH", "FLASH_ATTENTION"] if kernel == "both" else [kernel]
        members = [getattr(lib.SDPBackend, k) for k in kinds]
        return members if kernel == "both" else members[0]

    q, k, v = (RNG.standard_normal((2, 3, 5, 4)) for _ in range(3))
    with theirs.sdpa_kernel(chosen(theirs)):
        expected = torch.nn.functional.scaled_dot_product_attention(
            *(torch.tensor(a) for a in (q, k, v)), is_causal=True
        )
    with ours.sdpa_kernel(chosen(ours)):
        selected = [b.name for b in ours.enabled_backends()]
        got = F.scaled_dot_product_attention(*(rg.tensor(a) for a in (q, k, v)), is_causal=True)
    assert selected == (["MATH", "FLASH_ATTENTION"] if kernel == "both" else [kernel])
    assert len(ours.enabled_backends()) == 5  # restored on exit
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-10, atol=1e-12)


def test_sdpa_kernel_refuses_what_is_not_a_backend():
    from retrograd.nn.attention import sdpa_kernel

    with pytest.raises(rg.InvalidArgumentError, match="SDPBackend"), sdpa_kernel("math"):
        pass
    q = rg.ones(1, 2, 3)
    # entered, as torch's: the attention called inside raises
    with sdpa_kernel([]), pytest.raises(rg.InvalidArgumentError, match="No viable backend"):
        rg.nn.functional.scaled_dot_product_attention(q, q, q)
    assert rg.nn.functional.scaled_dot_product_attention(q, q, q).shape == (1, 2, 3)


# -- memory formats -------------------------------------------------------------------------------
def test_memory_formats_keep_values_as_torchs_do():
    x = RNG.standard_normal((2, 3, 4, 5))
    for name in ("channels_last", "contiguous_format", "preserve_format"):
        expected = torch.tensor(x).to(memory_format=getattr(torch, name))
        got = rg.tensor(x).to(memory_format=getattr(rg, name))
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
        assert isinstance(getattr(rg, name), rg.memory_format)
    volume = RNG.standard_normal((2, 3, 2, 4, 5))
    expected = torch.tensor(volume).contiguous(memory_format=torch.channels_last_3d)
    got = rg.tensor(volume).contiguous(memory_format=rg.channels_last_3d)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    assert rg.tensor(x).is_contiguous(memory_format=rg.contiguous_format)
    assert torch.tensor(x).is_contiguous(memory_format=torch.contiguous_format)


def test_memory_formats_refuse_what_torch_refuses():
    with pytest.raises(RuntimeError, match="rank 4"):
        torch.ones(2, 3).contiguous(memory_format=torch.channels_last)
    with pytest.raises(rg.ShapeError, match="rank 4"):
        rg.ones((2, 3)).contiguous(memory_format=rg.channels_last)
    with pytest.raises(rg.ShapeError, match="rank 5"):
        rg.ones((2, 3, 4, 5)).to(memory_format=rg.channels_last_3d)
    # (asked, not converted: answered as torch answers, tests/test_leftovers18.py)
    assert torch.ones(2, 3, 4, 5).is_contiguous(memory_format=torch.channels_last) is False
    assert rg.ones((2, 3, 4, 5)).is_contiguous(memory_format=rg.channels_last) is False
    with pytest.raises(rg.InvalidArgumentError, match="memory_format"):
        rg.ones((2, 3)).to(memory_format="channels_last")


def test_module_to_channels_last_computes_torchs_outputs():
    torch.manual_seed(3)
    theirs = torch.nn.Conv2d(3, 4, 3).double()
    ours = nn.Conv2d(3, 4, 3).double()
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    assert ours.to(memory_format=rg.channels_last) is ours
    theirs = theirs.to(memory_format=torch.channels_last)
    x = RNG.standard_normal((2, 3, 6, 6))
    expected = theirs(torch.tensor(x).to(memory_format=torch.channels_last)).detach().numpy()
    got = ours(rg.tensor(x).to(memory_format=rg.channels_last)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-13)
    with pytest.raises(rg.InvalidArgumentError, match="memory_format"):
        ours.to(memory_format=torch.channels_last)


# -- the default device, autocast queries -------------------------------------------------------
def test_default_device_and_autocast_state_answer_as_torchs_on_the_cpu():
    if rg.current_backend().default_device.kind == "cpu":
        assert rg.get_default_device().type == torch.get_default_device().type == "cpu"
    assert rg.is_autocast_enabled() is torch.is_autocast_enabled() is False
    assert rg.is_autocast_enabled("cpu") is torch.is_autocast_enabled("cpu") is False
    with pytest.warns(DeprecationWarning):
        assert rg.is_autocast_cpu_enabled() is torch.is_autocast_cpu_enabled() is False
    for device_type in ("cpu", "cuda"):
        expected = str(torch.get_autocast_dtype(device_type)).removeprefix("torch.")
        assert rg.get_autocast_dtype(device_type) == expected
        assert rg.get_autocast_dtype(device_type) in (rg.bfloat16, rg.float16)
    for old in ("get_autocast_cpu_dtype", "get_autocast_gpu_dtype"):
        with pytest.warns(DeprecationWarning, match=old):
            expected = str(getattr(torch, old)()).removeprefix("torch.")
        with pytest.warns(DeprecationWarning, match=old):
            assert getattr(rg, old)() == expected
    with pytest.raises(rg.InvalidArgumentError, match="device_type"):
        rg.get_autocast_dtype("tpu")


def test_set_default_device_accepts_the_current_device_and_names_the_way_to_another():
    current = rg.get_default_device()
    rg.set_default_device(current)
    rg.set_default_device(current.type)
    assert rg.get_default_device() is current
    other = "cuda:0" if current.type == "cpu" else "cpu"
    with pytest.raises(rg.InvalidArgumentError, match="TorchBackend"):
        rg.set_default_device(other)
    assert rg.get_default_device() is current


# -- torch.futures ---------------------------------------------------------------------------------
def _futures_story(lib):
    """One use of ``lib.futures`` (a value, a chain, an error, a second completion); what
    happened, as plain values and exception types."""
    seen = []
    f = lib.futures.Future()
    story = [f.done()]
    chained = f.then(lambda fut: fut.value() * 10)
    f.add_done_callback(lambda fut: seen.append(("callback", fut.value())))
    f.set_result(4)
    story += [f.done(), f.wait(), chained.wait(), list(seen)]
    try:
        f.set_result(5)
    except RuntimeError:
        story.append("completed twice: RuntimeError")
    failed = lib.futures.Future()
    failed.set_exception(ValueError("boom"))
    for read in (failed.wait, failed.value):
        try:
            read()
        except ValueError as error:
            story.append(f"ValueError {error}")
    broken = f.then(lambda fut: 1 / 0)
    try:
        broken.wait()
    except RuntimeError as error:
        story.append("ZeroDivisionError" in str(error))
    story.append(lib.futures.wait_all([f, chained]))
    try:
        lib.futures.wait_all([f, failed])
    except ValueError as error:
        story.append(f"wait_all: {error}")
    collected = lib.futures.collect_all([f, chained]).wait()
    story.append([fut.value() for fut in collected])
    late = lib.futures.Future()
    threading.Timer(0.05, lambda: late.set_result("late")).start()
    story.append(lib.futures.wait_all([late]))
    return story


def test_futures_behave_as_torchs():
    assert _futures_story(rg) == _futures_story(torch)
    with pytest.raises(rg.futures.FutureError, match="not complete"):
        rg.futures.Future().value()


# -- SyncBatchNorm ---------------------------------------------------------------------------------
def _devices(n: int) -> list:
    return [rg.Device("cpu", i) for i in range(n)]


def _on_devices(devices, work):
    """``work(index, device)`` in one thread per device; results in device order."""
    results: list = [None] * len(devices)

    def run(index, device):
        try:
            results[index] = work(index, device)
        except BaseException as error:  # handed back to the test
            results[index] = error

    threads = [
        threading.Thread(target=run, args=(i, d), daemon=True) for i, d in enumerate(devices)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60.0)
        assert not thread.is_alive(), "a device thread hung"
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("shape", [(6, 3, 4, 5), (8, 3)])
def test_sync_batch_norm_over_devices_is_torchs_batch_norm_of_the_whole_batch(shape, momentum):
    """Each of 3 devices normalizes its share of a batch by the statistics of all of it: the
    outputs, input gradients, summed parameter gradients and running statistics are those of
    torch's BatchNorm over the whole batch (what torch's SyncBatchNorm computes)."""
    from retrograd import distributed as dist

    torch.manual_seed(5)
    reference = torch.nn.BatchNorm2d(3, momentum=momentum) if len(shape) == 4 else None
    reference = reference or torch.nn.BatchNorm1d(3, momentum=momentum)
    reference = reference.double()
    with torch.no_grad():
        reference.weight.uniform_(0.5, 1.5)
        reference.bias.uniform_(-0.5, 0.5)
    state = {k: v.detach().numpy().copy() for k, v in reference.state_dict().items()}
    x, seed = RNG.standard_normal(shape) * 2.0 + 0.5, RNG.standard_normal(shape)
    devices, steps = _devices(3), 2
    shares = np.array_split(np.arange(shape[0]), len(devices))

    def work(index, device):
        layer = nn.SyncBatchNorm(3, momentum=momentum, dtype="float64", device=device)
        layer.load_state_dict(state)
        outs, grads = [], []
        for _ in range(steps):
            xs = rg.tensor(x[shares[index]], device=device).require_grad()
            out = layer(xs)
            found = (out * rg.tensor(seed[shares[index]], device=device)).sum().backward()
            outs.append(out.numpy())
            grads.append([g.grad(found).numpy() for g in (xs, layer.weight, layer.bias)])
        return outs, grads, {k: np.asarray(v) for k, v in layer.state_dict().items()}

    with dist.DistributedContext(devices, dist.DistributedConfig(timeout=30.0)):
        results = _on_devices(devices, work)
    for step in range(steps):
        t_x = torch.tensor(x, requires_grad=True)
        t_out = reference(t_x)
        (t_out * torch.tensor(seed)).sum().backward()
        got = np.concatenate([outs[step] for outs, _, _ in results])
        np.testing.assert_allclose(got, t_out.detach().numpy(), rtol=1e-10, atol=1e-11)
        x_grad = np.concatenate([grads[step][0] for _, grads, _ in results])
        np.testing.assert_allclose(x_grad, t_x.grad.numpy(), rtol=1e-9, atol=1e-10)
        for k, param in ((1, reference.weight), (2, reference.bias)):
            summed = sum(grads[step][k] for _, grads, _ in results)
            np.testing.assert_allclose(summed, param.grad.numpy(), rtol=1e-9, atol=1e-10)
        reference.zero_grad()
    for _, _, own in results:
        for name, value in reference.state_dict().items():
            np.testing.assert_allclose(own[name], value.numpy(), rtol=1e-10, atol=1e-12)


def test_sync_batch_norm_alone_is_batch_norm_and_converts_as_torchs():
    torch.manual_seed(9)
    theirs = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 1), torch.nn.BatchNorm2d(3)).double()
    theirs = torch.nn.SyncBatchNorm.convert_sync_batchnorm(theirs)
    ours = nn.SyncBatchNorm.convert_sync_batchnorm(
        nn.Sequential(nn.Conv2d(2, 3, 1), nn.BatchNorm2d(3)).double()
    )
    assert type(ours[1]).__name__ == type(theirs[1]).__name__ == "SyncBatchNorm"
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    x = RNG.standard_normal((4, 2, 3, 3))
    for mode in ("train", "eval"):
        getattr(ours, mode)()
        getattr(theirs, mode)()
        expected = theirs(torch.tensor(x)).detach().numpy()
        np.testing.assert_allclose(ours(rg.tensor(x)).numpy(), expected, rtol=1e-10, atol=1e-12)
    for name, value in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[name], value.numpy(), rtol=1e-10)
    with pytest.raises(rg.ShapeError, match="at least 2D"):
        nn.SyncBatchNorm(3)(rg.ones((3,)))
    with pytest.raises(rg.InvalidArgumentError, match="process_group"):
        nn.SyncBatchNorm(3, process_group="group")


# -- forms that cannot hold: complex, sparse, nested ---------------------------------------------
def test_layouts_are_torchs_and_every_tensor_is_strided():
    t = rg.ones((2, 3))
    assert t.layout is rg.strided and repr(t.layout) == "retrograd.strided"
    assert str(torch.ones(2, 3).layout) == "torch.strided"
    assert t.is_sparse is torch.ones(2, 3).is_sparse is False
    assert {layout.name for layout in (rg.strided, rg.sparse_coo, rg.jagged)} == {
        str(layout).removeprefix("torch.")
        for layout in (torch.strided, torch.sparse_coo, torch.jagged)
    }


REFUSED = {
    "view_as_real": (lambda: rg.view_as_real(rg.ones((2, 2))), rg.DTypeError, "complex"),
    "view_as_complex": (lambda: rg.view_as_complex(rg.ones((2, 3))), rg.ShapeError, "size 2"),
    "floor": (lambda: rg.ones(2, dtype=rg.cfloat).floor(), rg.DTypeError, "complex64"),
    "to_sparse_csr": (lambda: rg.ones((2, 2)).to_sparse_csr(), rg.InvalidArgumentError, "sparse"),
    "to_sparse_csc": (lambda: rg.ones((2, 2)).to_sparse_csc(), rg.InvalidArgumentError, "CSC"),
    "sparse_coo_tensor": (  # hybrid values (dense dimensions)
        lambda: rg.sparse_coo_tensor(rg.tensor([[0], [1]]), rg.ones((1, 3)), (2, 2, 3)),
        rg.ShapeError,
        "hybrid",
    ),
    "nested.nested_tensor": (
        lambda: rg.nested.nested_tensor([rg.ones((2,)), rg.ones((3,))], layout=rg.jagged),
        rg.InvalidArgumentError,
        "nested",
    ),
}


def test_spmm_of_dense_matrices_is_mm_as_torchs():
    """``torch.spmm`` takes a dense first operand and is then ``mm`` (gcn/main.py's
    ``torch.spmm(adj_mat, support)``); retrograd's refused it as a sparse form."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 2))
    weights = rng.standard_normal((4, 2))
    ta, tb = (torch.tensor(v, requires_grad=True) for v in (a, b))
    (torch.spmm(ta, tb) * torch.tensor(weights)).sum().backward()
    ra, rb = rg.tensor(a, requires_grad=True), rg.tensor(b, requires_grad=True)
    out = rg.spmm(ra, rb)
    grads = (out * rg.tensor(weights)).sum().backward()
    np.testing.assert_allclose(out.numpy(), (ta @ tb).detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(ra.grad(grads).numpy(), ta.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(rb.grad(grads).numpy(), tb.grad.numpy(), rtol=1e-12)
    for x, y in [((2, 3, 4), (4, 2)), ((3, 4), (4,)), ((3,), (3, 2))]:
        with pytest.raises(RuntimeError):
            torch.spmm(torch.ones(x), torch.ones(y))
        with pytest.raises(rg.ShapeError, match="spmm"):
            rg.spmm(rg.ones(x), rg.ones(y))


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_cannot_hold_raises_an_error_that_names_it(name):
    call, error, word = REFUSED[name]
    with pytest.raises(error, match=word) as raised:
        call()
    assert str(raised.value).startswith(name.split(".")[-1]) or name in str(raised.value)


# -- Generator -------------------------------------------------------------------------------------
def _generator_story(lib):
    """What a ``lib.Generator`` promises, as booleans and ints (the draws themselves differ
    between the libraries: another algorithm)."""
    from torch.utils import data as torch_data

    from retrograd.utils import data as rg_data

    data = rg_data if lib is rg else torch_data
    g = lib.Generator()
    story = [g.initial_seed(), g.manual_seed(5) is g, g.initial_seed()]
    first = lib.rand(4, generator=g)
    g.manual_seed(5)
    story.append(bool((lib.rand(4, generator=g) == first).all()))
    story.append(bool((lib.rand(4, generator=g) == first).all()))  # the stream moved on
    lib.manual_seed(1)
    expected = lib.rand(3)
    lib.manual_seed(1)
    lib.randn(2, generator=g)  # draws from g leave the global stream alone
    story.append(bool((lib.rand(3) == expected).all()))
    state = g.get_state()
    before = lib.randn(3, generator=g)
    g.set_state(state)
    story.append(bool((lib.randn(3, generator=g) == before).all()))
    same = [lib.randperm(20, generator=lib.Generator().manual_seed(9)).tolist() for _ in range(2)]
    story += [same[0] == same[1], sorted(same[0]) == list(range(20))]
    ints = lib.randint(3, 7, (50,), generator=g)
    story += [str(ints.dtype).removeprefix("torch."), int(ints.min()) >= 3, int(ints.max()) < 7]
    filled = [lib.zeros(4).uniform_(generator=lib.Generator().manual_seed(2)) for _ in range(2)]
    story.append(bool((filled[0] == filled[1]).all()))
    normal = lib.normal(0.0, 1.0, (3,), generator=lib.Generator().manual_seed(4))
    story.append(
        bool((normal == lib.normal(0.0, 1.0, (3,), generator=lib.Generator().manual_seed(4))).all())
    )
    splits = [
        [
            list(part.indices)
            for part in data.random_split(range(10), [3, 7], lib.Generator().manual_seed(1))
        ]
        for _ in range(2)
    ]
    story += [splits[0] == splits[1], sorted(splits[0][0] + splits[0][1]) == list(range(10))]
    orders = [
        [
            int(b)
            for batch in data.DataLoader(
                range(8), shuffle=True, generator=lib.Generator().manual_seed(3)
            )
            for b in batch
        ]
        for _ in range(2)
    ]
    story += [orders[0] == orders[1], sorted(orders[0]) == list(range(8))]
    story.append(lib.Generator().manual_seed(-1).initial_seed())
    fresh = g.seed()
    story += [isinstance(fresh, int), g.initial_seed() == fresh]
    return story


def test_generator_behaves_as_torchs():
    assert _generator_story(rg) == _generator_story(torch)


@pytest.mark.numpy_only
def test_a_generator_draws_what_the_global_stream_draws_after_the_same_seed():
    rg.manual_seed(7)
    expected = [rg.rand(5).tolist(), rg.randn(2, 3, dtype="float64").tolist()]
    g = rg.Generator().manual_seed(7)
    assert [
        rg.rand(5, generator=g).tolist(),
        rg.randn(2, 3, dtype="float64", generator=g).tolist(),
    ] == expected
    # (a float state is the wrong type: torch's "RNG state must be a torch.ByteTensor")
    with pytest.raises(rg.DTypeError, match="get_state"):
        g.set_state(rg.zeros((3,)))


# -- cuda queries ----------------------------------------------------------------------------------
def test_cuda_queries_answer_as_torchs():
    assert rg.cuda.is_available() is torch.cuda.is_available()
    assert rg.cuda.device_count() == torch.cuda.device_count()
    count = torch.cuda.device_count()
    with pytest.raises(rg.InvalidArgumentError, match="device"):
        rg.cuda.set_device(count)  # one past the last (device 0 where there is none)
    if count == 0:
        for call in (rg.cuda.current_device, rg.cuda.synchronize):
            with pytest.raises(rg.InvalidArgumentError, match="no CUDA device"):
                call()
        return
    rg.cuda.set_device(count - 1)
    assert rg.cuda.current_device() == torch.cuda.current_device() == count - 1
    rg.cuda.synchronize()
    rg.cuda.set_device("cuda:0")
    assert torch.cuda.current_device() == 0


def test_get_unsafe_globals_in_checkpoint_is_empty_for_what_save_writes(tmp_path):
    import io

    path = tmp_path / "checkpoint.pt"
    rg.save({"w": rg.tensor([1.0, 2.0]), "step": 3}, path)
    theirs = tmp_path / "torch.pt"
    torch.save({"w": torch.ones(2), "step": 3}, theirs)
    assert rg.serialization.get_unsafe_globals_in_checkpoint(path) == []
    assert torch.serialization.get_unsafe_globals_in_checkpoint(theirs) == []
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buffer)
    buffer.seek(0)
    assert rg.serialization.get_unsafe_globals_in_checkpoint(buffer) == []  # torch's file


def test_accelerator_answers_as_torchs_on_this_machine():
    """``torch.accelerator`` (``use_accel = not args.no_accel and
    torch.accelerator.is_available()`` in current pytorch/examples scripts): the same answers
    as torch's; without a device, the calls that need one raise."""
    assert rg.accelerator.is_available() == torch.accelerator.is_available()
    assert rg.accelerator.device_count() == torch.accelerator.device_count()
    theirs = torch.accelerator.current_accelerator()
    ours = rg.accelerator.current_accelerator()
    assert (ours is None) == (theirs is None)
    if theirs is None:
        for call in ("current_device_index", "synchronize"):
            with pytest.raises(RuntimeError):
                getattr(torch.accelerator, call)()
            with pytest.raises(rg.InvalidArgumentError, match="none is available"):
                getattr(rg.accelerator, call)()
    else:
        assert ours.type == theirs.type
        assert rg.accelerator.current_device_index() == torch.accelerator.current_device_index()
