"""Defects found by the reliability sweep (``tests/test_reliability_sweep.py``), one test each:
a silent wrong result (a gradient lost when an inner-backend tensor came first), a bare Python
exception (zipfile's ``NotImplementedError`` for a damaged header, ``TypeError`` of a
non-callable ``lr_lambda``), a message that named the wrong thing (a ``None`` state value
reported as a shape), or an error where torch gives a result (empty batches through the
normalizations and attention, 0-d tensors with dimension 0 or -1, empty integrals, einsum's
sublist form). Expected values come from torch."""

from __future__ import annotations

import errno
import io
import zipfile

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)
from backends import inner_backend
from retrograd.errors import KeyMismatchError
from retrograd.utils import data as D  # noqa: N812  (torch's idiom)


def _close(ours, theirs, **tolerance):
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else theirs
    assert tuple(ours.shape) == tuple(theirs.shape), (ours.shape, theirs.shape)
    np.testing.assert_allclose(ours.numpy(), theirs, equal_nan=True, **tolerance)


# -- an inner-backend tensor with an autodiff one ------------------------------------------------
def test_an_inner_backend_tensor_first_no_longer_drops_the_other_ones_gradient():
    """``inner * w`` was computed on the inner backend: the result was untracked and ``w``
    got no gradient (``w * inner`` was right)."""
    backend = rg.Autodiff(inner_backend())
    w = rg.tensor([1.0, 2.0, 3.0], backend=backend).require_grad()
    x = rg.tensor([4.0, 5.0, 6.0], backend=backend.inner)
    for loss in (
        (x * w).sum(),
        (w * x).sum(),
        (x - w).sum(),
        (x > w).float().sum() + (x / w).sum(),
    ):
        assert loss.requires_grad
    grads = ((x * w).sum() + (x - w).sum()).backward()
    assert w.grad(grads).tolist() == [3.0, 4.0, 5.0]


def test_ops_that_would_drop_a_graph_record_it_or_refuse_and_leave_it_usable():
    backend = rg.Autodiff(inner_backend())
    w = rg.tensor([1.0, 2.0], backend=backend).require_grad()
    pending = w * w
    x = rg.tensor([4.0, 5.0], backend=backend.inner)
    # an op of an inner-backend tensor and a tracked one runs on the decorator, the inner
    # tensor a constant (torch's graph of a gradient and a parameter): values and gradients
    # as torch's
    tw = torch.tensor([1.0, 2.0], requires_grad=True)
    tx = torch.tensor([4.0, 5.0])
    for ours, theirs in ((rg.cat([x, w]), torch.cat([tx, tw])), (x @ w, tx @ tw),
                         (rg.stack([x, w]), torch.stack([tx, tw]))):  # fmt: skip
        assert ours.requires_grad
        grads = (ours * ours).sum().backward()
        tw.grad = None
        (theirs * theirs).sum().backward()
        assert ours.tolist() == theirs.tolist()
        assert w.grad(grads).tolist() == tw.grad.tolist()
    # an in-place write into the inner tensor, whose backend records no graph, is refused
    pending = w * w
    for call, op in ((lambda: x.add_(w), "add_"), (lambda: x.copy_(w), "copy_")):
        with pytest.raises(rg.AutodiffError, match=rf"^{op}: .*requires grad.*records no graph"):
            call()
    assert x.tolist() == [4.0, 5.0]  # the failed in-place ops changed nothing
    with rg.no_grad():  # nothing to record: the values are written
        x.add_(w)
    assert x.tolist() == [5.0, 7.0]
    assert w.grad(pending.sum().backward()).tolist() == [2.0, 4.0]
    assert rg.cat([rg.Tensor.from_inner(x, backend=backend), w]).requires_grad


def test_from_inner_refuses_what_is_not_a_tensor_of_the_inner_backend():
    backend = rg.Autodiff(inner_backend())
    inner = rg.ones(2, backend=backend.inner)
    with pytest.raises(rg.DTypeError, match="from_inner: expected a tensor"):
        rg.Tensor.from_inner(None, backend=backend)
    with pytest.raises(rg.AutodiffError, match="from_inner: 'x' is not an autodiff backend"):
        rg.Tensor.from_inner(inner, "x")
    # an autodiff tensor's primitive wrapped again made a tensor every later op failed on
    with pytest.raises(rg.RetrogradError, match=r"from_inner: the tensor \(\[2\] float32\)"):
        rg.Tensor.from_inner(rg.ones(2, backend=backend), backend=backend)
    assert (rg.Tensor.from_inner(inner, backend=backend) + 1).tolist() == [2.0, 2.0]


# -- 0-d tensors take dimension 0 and -1 as torch's ----------------------------------------------
@pytest.mark.parametrize(
    "call",
    [
        lambda t: t.flip(0), lambda t: t.flip(-1), lambda t: t.flip((0,)),
        lambda t: t.squeeze(0), lambda t: t.squeeze(-1), lambda t: t.squeeze([0]),
        lambda t: t.transpose(0, -1), lambda t: t.swapaxes(0, 0), lambda t: t.movedim(0, -1),
        lambda t: t.movedim((0,), (-1,)), lambda t: t.quantile(0.25, 0),
        lambda t: t.nanquantile(0.5, -1, True),
    ],
)  # fmt: skip
def test_shape_ops_of_a_0d_tensor_take_dim_0_and_minus_1(call):
    x = rg.tensor(1.5).require_grad()
    t = torch.tensor(1.5, requires_grad=True)
    ours, theirs = call(x), call(t)
    _close(ours, theirs)
    grads = (ours * 3.0).backward()
    (theirs * 3.0).backward()
    assert x.grad(grads).item() == t.grad.item()


def test_a_0d_tensor_still_refuses_other_dimensions():
    for call in (lambda t: t.flip(1), lambda t: t.transpose(0, 1), lambda t: t.movedim(0, -2),
                 lambda t: t.quantile(0.5, 1), lambda t: t.squeeze(2)):  # fmt: skip
        with pytest.raises(rg.ShapeError, match="0-d tensor"):
            call(rg.tensor(1.5))
    q = torch.tensor([0.2, 0.5])
    _close(
        rg.tensor(1.5).quantile(rg.tensor(q.numpy()), 0, True),
        torch.tensor(1.5).quantile(q, 0, True),
    )


# -- empty integrals, combinations and einsum's sublist form -------------------------------------
@pytest.mark.parametrize(
    "call",
    [
        lambda m, z: m.trapezoid(z(0)), lambda m, z: m.trapezoid(z(3, 0)),
        lambda m, z: m.trapezoid(z(3, 0), z(0)), lambda m, z: m.trapezoid(z(3, 0), dim=0),
        lambda m, z: m.trapezoid(z(0), dx=2.0), lambda m, z: m.cumulative_trapezoid(z(0)),
        lambda m, z: m.cumulative_trapezoid(z(3, 0)), lambda m, z: m.cumulative_trapezoid(z(0, 3)),
        lambda m, z: m.cumulative_trapezoid(z(3, 0), z(0)),
        lambda m, z: m.combinations(z(0), 0), lambda m, z: m.combinations(z(3), 0),
        lambda m, z: m.combinations(z(3), 0, True), lambda m, z: m.combinations(z(0), 2),
    ],
)  # fmt: skip
def test_empty_integrals_and_combinations_match_torch(call):
    _close(call(rg, lambda *s: rg.zeros(s)), call(torch, torch.zeros))


def test_einsum_takes_torchs_sublist_form():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    for sublists in (([0, 1], [1, 2]), ([0, 1], [1, 2], [0, 2]), ([0, 1], [1, 2], [2]),
                     ([..., 1], [1, 2], [..., 2])):  # fmt: skip
        first, second, *out = sublists
        ours = rg.einsum(rg.tensor(a), first, rg.tensor(b), second, *out)
        _close(ours, torch.einsum(torch.tensor(a), first, torch.tensor(b), second, *out))
    _close(rg.einsum(rg.tensor(a), [0, 1], []), torch.einsum(torch.tensor(a), [0, 1], []))
    with pytest.raises(rg.InvalidArgumentError, match="einsum: subscript 60 is out of range"):
        rg.einsum(rg.tensor(a), [60, 1])
    with pytest.raises(rg.DTypeError, match="einsum: subscripts must be ints"):
        rg.einsum(rg.tensor(a), [0.5, 1])


# -- empty batches through normalization, attention and sampling ---------------------------------
def _both(call, *shapes, grad=True):
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(s) if s is not None else None for s in shapes]
    ours_in = [rg.tensor(a).require_grad() if grad else rg.tensor(a) for a in arrays]
    theirs_in = [torch.tensor(a, requires_grad=grad) for a in arrays]
    ours, theirs = call(rg, F, *ours_in), call(torch, torch.nn.functional, *theirs_in)
    _close(ours, theirs, rtol=1e-6, atol=1e-12)
    if grad:
        grads = ours.sum().backward()
        theirs.sum().backward()
        for mine, other in zip(ours_in, theirs_in):
            _close(mine.grad(grads), other.grad, rtol=1e-6, atol=1e-12)


def _batch_norm_stats(m, f, x, w, b):
    mean, var = m.zeros(3, dtype=m.float64), m.ones(3, dtype=m.float64)
    return f.batch_norm(x, mean, var, w, b, training=True)


def _sdpa(m, f, q, k, v):
    return f.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize(
    "call, shapes",
    [
        (_batch_norm_stats, [(0, 3), (3,), (3,)]),
        (lambda m, f, x, w, b: f.batch_norm(x, None, None, w, b, True), [(2, 3, 0), (3,), (3,)]),
        # (torch's own instance_norm fails on N = 0 with a weight: IndexError in select)
        (lambda m, f, x: f.instance_norm(x), [(0, 3, 5)]),
        (lambda m, f, x, w, b: f.instance_norm(x, weight=w, bias=b), [(2, 3, 0), (3,), (3,)]),
        (lambda m, f, x, w, b: f.group_norm(x, 2, w, b), [(0, 4, 3), (4,), (4,)]),
        (_sdpa, [(1, 2, 4), (1, 0, 4), (1, 0, 4)]),  # no keys: zeros
        (_sdpa, [(1, 2, 0), (1, 3, 0), (1, 3, 4)]),  # no features: uniform weights
        (lambda m, f, x, g: f.grid_sample(x, g, align_corners=False), [(0, 1, 3, 3), (0, 2, 2, 2)]),
        (lambda m, f, x: f.adaptive_avg_pool1d(x, 1), [(1, 3, 0)]),
    ],
)
def test_empty_inputs_through_nn_functions_match_torch(call, shapes):
    _both(call, *shapes)


@pytest.mark.parametrize(
    "call, shapes",
    [
        # torch's backward fails here (an empty grad_output), and its group norm gives the
        # weight a NaN gradient over no elements: the values alone are compared
        (lambda m, f, x: f.adaptive_avg_pool1d(x, 0), [(1, 3, 4)]),
        (lambda m, f, x: f.adaptive_avg_pool2d(x, (2, 0)), [(1, 1, 4, 4)]),
        (lambda m, f, x, w, b: f.group_norm(x, 2, w, b), [(2, 4, 0), (4,), (4,)]),
    ],
)
def test_empty_outputs_of_nn_functions_match_torchs_values(call, shapes):
    _both(call, *shapes, grad=False)


def test_max_unpool_of_an_empty_batch_matches_torch():
    ours = F.max_unpool2d(rg.ones((0, 2, 2, 2)), rg.zeros((0, 2, 2, 2), dtype="int64"), 2)
    theirs = torch.nn.functional.max_unpool2d(
        torch.ones(0, 2, 2, 2), torch.zeros(0, 2, 2, 2, dtype=torch.long), 2
    )
    _close(ours, theirs)


def test_batch_norm_modules_pass_an_empty_batch_and_keep_their_statistics():
    ours, theirs = rg.nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
    for module, lib in ((ours, rg), (theirs, torch)):
        module(lib.ones((4, 3, 2, 2)) * 2.0)
        out = module(lib.ones((0, 3, 2, 2)))
        assert tuple(out.shape) == (0, 3, 2, 2)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        _close(getattr(ours, name), getattr(theirs, name), rtol=1e-6)
    # a batch of one value per channel is still refused, as torch refuses it
    with pytest.raises(rg.InvalidArgumentError, match="more than 1 value per channel"):
        rg.nn.BatchNorm1d(3)(rg.ones((1, 3)))


# -- files -----------------------------------------------------------------------------------
def _saved_state() -> bytes:
    buffer = io.BytesIO()
    rg.save({"w": rg.tensor([[1.0, 2.0], [3.0, 4.0]]), "b": rg.tensor([0.5, -0.5])}, buffer)
    return buffer.getvalue()


def _central_entries(data: bytes) -> list[int]:
    """Offsets of the zip's central directory entries."""
    offsets, start = [], 0
    while (found := data.find(b"PK\x01\x02", start)) != -1:
        offsets.append(found)
        start = found + 4
    return offsets


@pytest.mark.parametrize(
    "field, bit, said",
    [
        (6, 6, "zip file version"),  # "version needed" past zipfile's: NotImplementedError
        (8, 0, "encrypted"),  # the encryption flag: zipfile's RuntimeError
        (8, 5, "compressed patched data"),  # NotImplementedError
        (10, 0, "compression method"),  # a method zipfile lacks: NotImplementedError
        (33, 1, "end record counts"),  # a comment length that swallows the entries after it
    ],
)
def test_a_damaged_zip_header_is_one_damaged_file_error(tmp_path, field, bit, said):
    data = bytearray(_saved_state())
    entry = _central_entries(bytes(data))[0]
    data[entry + field] ^= 1 << bit
    path = tmp_path / "damaged.pt"
    path.write_bytes(bytes(data))
    damaged = r"^load: .*damaged.pt' is (a torch file, )?damaged"  # (rg.save writes torch's)
    with pytest.raises(rg.InvalidArgumentError, match=damaged) as raised:
        rg.load(path)
    assert said in str(raised.value)
    path.write_bytes(_saved_state())
    assert rg.load(path)["w"].tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_save_keeps_the_old_file_when_the_disk_fills_at_the_sync_or_the_rename(
    tmp_path, monkeypatch
):
    import os

    path = tmp_path / "state.pt"
    rg.save({"w": rg.tensor([1.0, 2.0])}, path)
    before = path.read_bytes()

    def full_disk(*_args):
        raise OSError(errno.ENOSPC, "No space left on device")

    for name in ("fsync", "replace"):
        with monkeypatch.context() as patch:
            patch.setattr(os, name, full_disk)
            with pytest.raises(OSError) as raised:
                rg.save({"w": rg.tensor([3.0, 4.0, 5.0])}, path)
            assert raised.value.errno == errno.ENOSPC
        assert path.read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["state.pt"]  # no temporary
    model = rg.nn.Linear(2, 1)
    model.save(tmp_path / "model.npz")
    kept = (tmp_path / "model.npz").read_bytes()
    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", full_disk)
        with pytest.raises(OSError):
            rg.nn.Linear(2, 1).save(tmp_path / "model.npz")
    assert (tmp_path / "model.npz").read_bytes() == kept
    assert rg.load(path)["w"].tolist() == [1.0, 2.0]


@pytest.mark.parametrize(
    "value, said",
    [(None, "None"), ("abc", "'abc'"), ([[1.0, 2.0], [3.0]], "a value of type list"),
     ({"a": 1}, "a value of type dict"), (np.array(["a", "b"]), "<U1 values")],
)  # fmt: skip
def test_a_state_value_without_numbers_is_a_dtype_error_naming_it(value, said):
    """``None`` or a str was a 0-d object array, reported as a shape ("the state has []");
    ragged lists raised NumPy's bare ValueError."""
    model = rg.nn.Linear(2, 2)
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    with pytest.raises(rg.DTypeError) as raised:
        model.load_state_dict({"weight": value, "bias": rg.zeros(2)})
    assert str(raised.value).startswith(
        f"load_state_dict: 'weight' is float32, the state has {said}. "
    )
    for key, array in model.state_dict().items():
        np.testing.assert_array_equal(array.numpy(), before[key])


# -- schedules and data ----------------------------------------------------------------------
def test_schedules_refuse_what_torch_refuses_at_construction():
    opt = rg.optim.SGD([rg.nn.Parameter(rg.ones(2))], lr=0.1)
    sched = rg.optim.lr_scheduler
    with pytest.raises(rg.DTypeError, match="LambdaLR: lr_lambda must be callable, got 5"):
        sched.LambdaLR(opt, 5)
    with pytest.raises(rg.DTypeError, match="MultiplicativeLR: lr_lambda must be callable"):
        sched.MultiplicativeLR(opt, [None])
    for factor in (2.0, -0.5):
        with pytest.raises(rg.InvalidArgumentError, match="ConstantLR: factor must be between"):
            sched.ConstantLR(opt, factor)
        with pytest.raises(ValueError):
            torch.optim.lr_scheduler.ConstantLR(
                torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1), factor
            )
    schedule = sched.ConstantLR(opt, 0.5, total_iters=1)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)
    schedule.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1)


def test_data_errors_keep_torchs_classes_and_name_the_op():
    said = r"default_collate: .* keys \['a'\], another has keys \['b'\]"
    with pytest.raises(KeyMismatchError, match=said) as raised:
        list(D.DataLoader([{"a": 1}, {"b": 2}], batch_size=2))
    assert isinstance(raised.value, KeyError)  # torch's class
    with pytest.raises(KeyMismatchError, match="another is a int"):
        D.default_collate([{"a": 1}, 5])
    with pytest.raises(rg.IndexOutOfRangeError, match="ConcatDataset: index 5 is out"):
        D.ConcatDataset([[1], [2]])[5]
    # below -len torch raises a ValueError ("absolute value of index should not exceed ...")
    with pytest.raises(rg.InvalidArgumentError, match=r"ConcatDataset: absolute value.* -3"):
        D.ConcatDataset([[1], [2]])[-3]
    joined = D.ConcatDataset([[1], [2, 3]])
    assert [joined[i] for i in (-3, -1, 0, 2)] == [1, 3, 1, 3]
    batch = next(iter(D.DataLoader([{"a": 1, "b": 3}, {"b": 2, "a": 5}], batch_size=2)))
    assert batch["a"].tolist() == [1, 5] and batch["b"].tolist() == [3, 2]


def test_zipfile_is_what_the_damaged_header_cases_read():
    """The offsets above are the central directory's, as zipfile writes it (guards the
    parametrization against a change of the archive layout)."""
    data = _saved_state()
    entry = _central_entries(data)[0]
    info = zipfile.ZipFile(io.BytesIO(data)).infolist()[0]
    assert int.from_bytes(data[entry + 10 : entry + 12], "little") == info.compress_type
    assert int.from_bytes(data[entry + 32 : entry + 34], "little") == len(info.comment) == 0


# -- second pass: integers past int64, constructors, module lookups ------------------------------
@pytest.mark.parametrize(
    "call, error, said",
    [
        (lambda: rg.tensor([2**63]), rg.InvalidArgumentError, "9223372036854775808 is out"),
        (lambda: rg.tensor([1.0, 1e30], dtype="int64"), rg.InvalidArgumentError, "1e+30 is out"),
        (lambda: rg.tensor([float("nan")], dtype="int64"), rg.InvalidArgumentError, "nan is out"),
        (lambda: rg.tensor(np.array([2**63], np.uint64)), rg.InvalidArgumentError, "int64"),
        (lambda: rg.tensor([1, 2**63], dtype="int64"), rg.InvalidArgumentError, "int64"),
        (lambda: rg.randint(0, 2**70, (2,)), rg.InvalidArgumentError, "randint: low=0"),
        (lambda: rg.ones(3, dtype="int64") * 2**70, rg.InvalidArgumentError, "mul: the integer"),
        (lambda: 2**64 - rg.ones(3, dtype="int64"), rg.InvalidArgumentError, "sub: the integer"),
        (lambda: rg.spmm(None, rg.ones((2, 2))), rg.DTypeError, "spmm: input must be a tensor"),
        (lambda: rg.BudgetCheckpointing("12XB"), rg.InvalidArgumentError, "cannot read the size"),
        (lambda: rg.BudgetCheckpointing(-5), rg.InvalidArgumentError, "must be positive"),
        (lambda: rg.BudgetCheckpointing(None), rg.DTypeError, "an int or a string"),
        (lambda: rg.Autodiff(5), rg.DTypeError, "Autodiff: inner must be a backend"),
        (lambda: rg.Autodiff(rg.NumpyBackend(), "x"), rg.DTypeError, "CheckpointStrategy"),
        (lambda: rg.TorchBackend("tpu"), rg.InvalidArgumentError, "TorchBackend: not a device"),
        (lambda: rg.TorchBackend("cuda:x"), rg.InvalidArgumentError, "'cuda:x'"),
        (lambda: rg.TorchBackend("cpu", generator="x"), rg.InvalidArgumentError, "generator"),
        (lambda: rg.nn.Linear(3, 2).get_parameter("x"), KeyMismatchError,
         "get_parameter: Linear has no parameter 'x'"),
        (lambda: rg.nn.Linear(3, 2).get_buffer("a.b"), KeyMismatchError,
         "get_buffer: Linear has no sub-module 'a'"),
        (lambda: rg.nn.utils.prune.ln_structured(rg.nn.Linear(3, 2), "weight", 0.5, 2, dim=5),
         rg.IndexOutOfRangeError, "prune: invalid dim 5"),
        (lambda: rg.cross(rg.ones((2, 2)), rg.ones((2, 2))), rg.ShapeError,
         "cross: no dimension of size 3"),
    ],
)  # fmt: skip
def test_bare_exceptions_and_wrapped_integers_found_in_the_second_pass(call, error, said):
    """Each was a bare ``ValueError``/``TypeError``/``RuntimeError``/``KeyError``/
    ``IndexError``/``OverflowError``, or (``tensor([2**63])``, ``randint`` past int64) a
    silently wrapped negative number; torch refuses every one of these values too."""
    with pytest.raises(error) as raised:
        call()
    assert said in str(raised.value)


def test_int64_edges_and_good_constructors_still_work():
    assert rg.tensor([2**63 - 1]).tolist() == [2**63 - 1]
    assert rg.tensor(np.array([5], np.uint64)).tolist() == [5]
    assert (rg.ones(2, dtype="int64") + (2**63 - 2)).tolist() == [2**63 - 1] * 2
    assert rg.randint(-(2**63), 2**63, (3,)).dtype == "int64"
    assert rg.BudgetCheckpointing("64MiB") is not None
    a, b = np.random.default_rng(2).standard_normal((2, 4, 3, 2))
    ours = rg.tensor(a).cross(rg.tensor(b))  # torch's default: the first dim of size 3
    np.testing.assert_allclose(ours.numpy(), torch.tensor(a).cross(torch.tensor(b), dim=1).numpy())


@pytest.mark.parametrize(
    "write",
    [lambda lib, t: t.zero_(), lambda lib, t: t.fill_(2.0),
     lambda lib, t: t.copy_(lib.tensor([1.0, 2.0, 3.0]))],
)  # fmt: skip
def test_a_constant_written_over_an_intermediate_keeps_it_in_the_graph(write):
    """``y = x * 1.5; y.zero_()`` left y cut from the graph: a later backward found nothing
    that requires grad (torch: y stays in it, x's gradient is zero)."""
    x, t = rg.ones(3).require_grad(), torch.ones(3, requires_grad=True)
    ours, theirs = x * 1.5, t * 1.5
    write(rg, ours)
    write(torch, theirs)
    assert ours.requires_grad and theirs.requires_grad
    grads = (ours * ours + x).sum().backward()
    (theirs * theirs + t).sum().backward()
    np.testing.assert_array_equal(x.grad(grads).numpy(), t.grad.numpy())


# -- indexing: torch's reading of lists and bool scalars -----------------------------------------
@pytest.mark.parametrize(
    "index",
    [
        lambda m: [[0, 1], [1, 0]],  # a list of lists is a tuple of indices (was a 4-d result)
        lambda m: [m.tensor([0, 1]), m.tensor([1, 2])],  # a list of tensors too
        lambda m: [[0, 1], slice(None)],  # (NumPy's bare ValueError before)
        lambda m: [slice(None), 0],
        lambda m: True,  # a bool scalar: a new dimension of size 1 (refused before)
        lambda m: False,  # ... or of size 0
        lambda m: (0, True),
        lambda m: (Ellipsis, False),
        lambda m: (m.tensor(True), 0),  # a 0-d bool tensor (was read as no index at all)
        lambda m: (m.tensor(False), Ellipsis, 1),  # (was the whole tensor: a wrong result)
    ],
)
def test_lists_and_bool_scalars_index_as_torch_reads_them(index):
    data = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    x, t = rg.tensor(data).require_grad(), torch.tensor(data, requires_grad=True)
    ours, theirs = x[index(rg)], t[index(torch)]
    _close(ours, theirs)
    grads = (ours * 2.0).sum().backward()
    (theirs * 2.0).sum().backward()
    _close(x.grad(grads), t.grad)
    written, expected = rg.tensor(data), torch.tensor(data)
    written[index(rg)] = -1.0
    expected[index(torch)] = -1.0
    _close(written, expected)


# -- module API: what would break the module later is refused at the call -----------------------
def test_module_registrations_refuse_what_would_break_the_module():
    model = rg.nn.Sequential(rg.nn.Linear(3, 2), rg.nn.ReLU())
    x = rg.ones((4, 3))
    expected = model(x).numpy()
    # a buffer over the parameter 'weight' replaced it: every forward failed (torch: KeyError)
    with pytest.raises(KeyMismatchError, match="register_buffer: 'weight' is already a param"):
        model[0].register_buffer("weight", rg.ones(2))
    with pytest.raises(KeyMismatchError, match="already a sub-module"):
        model.register_buffer("0", rg.ones(2))
    # a hook that is not callable failed every later forward
    with pytest.raises(rg.DTypeError, match="register_forward_hook: hook must be callable"):
        model.register_forward_hook(5)
    with pytest.raises(rg.DTypeError, match="register_forward_pre_hook: hook must be callable"):
        model[0].register_forward_pre_hook(None)
    with pytest.raises(rg.DTypeError, match="apply: fn must be callable"):
        model.apply(5)
    with pytest.raises(rg.DTypeError, match="state_dict: prefix must be a str"):
        model.state_dict(prefix=5)
    np.testing.assert_array_equal(model(x).numpy(), expected)
    grads = model(x).sum().backward()
    assert all(p.grad(grads) is not None for p in model.parameters())
    model[0].register_buffer("scale", rg.ones(2))  # a new name still registers
    assert sorted(model.state_dict()) == ["0.bias", "0.scale", "0.weight"]
    assert sorted(model.state_dict(prefix="m.")) == ["m.0.bias", "m.0.scale", "m.0.weight"]
