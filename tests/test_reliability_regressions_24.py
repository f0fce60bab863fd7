"""Round 24 of the reliability regressions: each test is named for the behaviour it keeps and
failed before its fix. torch is the reference: where torch refuses, retrograd raises an error
of API.md section 7 naming the op; where torch answers, retrograd gives its value.

Found by a differential sweep of ``rg.fft``, ``rg.signal``, ``rg.func``, the LAPACK-named
forms (``geqrf`` and the deprecated ``Tensor.qr``/``svd``/``lu_solve``), the backend
settings, ``rg.random``'s torch names and the pixel-shuffle and ``Softmax2d`` layers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd import nn
from retrograd.nn import functional as F  # noqa: N812 (torch's idiom)


# == rg.func: duplicate argnums ===================================================================
@pytest.mark.parametrize("argnums", [(0, 0), (0, -2)])
def test_grad_refuses_duplicate_argnums_as_torch_does(argnums):
    # the repeated argument got a fresh leaf of its own that the function never saw: its
    # gradient came back as zeros, silently
    def product(a, b):
        return (a * b).sum()

    with pytest.raises(RuntimeError, match="argnums elements must be unique"):
        torch.func.grad(product, argnums=argnums)(torch.ones(3), torch.ones(3))
    a, b = rg.tensor([1.0, 2.0, 3.0]), rg.tensor([4.0, 5.0, 6.0])
    with pytest.raises(rg.InvalidArgumentError, match=r"grad.*argnums elements must be unique"):
        rg.func.grad(product, argnums=argnums)(a, b)
    # usable after the error: the distinct argnums still give b and a
    da, db = rg.func.grad(product, argnums=(0, 1))(a, b)
    assert da.tolist() == [4.0, 5.0, 6.0] and db.tolist() == [1.0, 2.0, 3.0]


def test_jacrev_refuses_duplicate_argnums():
    with pytest.raises(rg.InvalidArgumentError, match=r"jacrev.*argnums elements must be unique"):
        rg.func.jacrev(lambda a: a * 2, argnums=(0, 0))(rg.ones(3))


def test_vmap_of_something_not_callable_names_vmap():
    with pytest.raises(TypeError):  # torch's
        torch.func.vmap(3)(torch.ones(2))
    with pytest.raises(rg.DTypeError, match=r"vmap: func must be callable, got 3"):
        rg.func.vmap(3)


# == rg.fft's real helpers and rg.signal ===========================================================
@pytest.mark.parametrize(
    "call",
    [
        lambda fft: fft.fftshift(rg.ones(2, 3), 1.5),
        lambda fft: fft.ifftshift(rg.ones(2, 3), dim=1.0),
        lambda fft: fft.fftshift(rg.ones(2, 3), 0, 1),
        lambda fft: fft.fftfreq(4, 1.0, 2),
        lambda fft: fft.ifftshift(rg.ones(2, 3), out=rg.ones(2, 3)),
    ],
    ids=["shift-float-dim", "ishift-float-dim", "shift-extra", "freq-extra", "ishift-out"],
)
def test_fft_helpers_answer_arguments_they_cannot_take_with_the_hierarchys_error(call):
    # they were the one public namespace left unguarded: Python's bare TypeError came out
    with pytest.raises(rg.DTypeError, match=r"^fft\.i?r?fft(shift|freq)"):
        call(rg.fft)
    assert rg.fft.fftshift(rg.arange(5)).tolist() == torch.fft.fftshift(torch.arange(5)).tolist()


def test_signal_rfft_of_a_signal_without_samples_is_refused_as_torch_refuses_it():
    with pytest.raises(RuntimeError, match="Invalid number of data points"):
        torch.fft.rfft(torch.zeros(2, 0), dim=1)
    # it gave a spectrum of one zero, the transform of nothing
    with pytest.raises(rg.ShapeError, match=r"signal\.rfft: a signal of 0 samples along dim 1"):
        rg.signal.rfft(rg.zeros(2, 0), 1)
    re, im = rg.signal.rfft(rg.zeros(2, 0), 1, 4)  # with n the zero-padded signal has one
    assert re.shape == im.shape == (2, 3)


def test_signal_functions_name_themselves_on_an_unknown_keyword():
    with pytest.raises(rg.DTypeError, match=r"signal\.rfft: invalid arguments.*norm"):
        rg.signal.rfft(rg.ones(4), 0, norm="ortho")
    re, im = rg.signal.rfft(rg.ones(4), 0)
    with pytest.raises(rg.DTypeError, match=r"signal\.irfft: invalid arguments"):
        rg.signal.irfft(re, im, 0, 4, 5)


# == LAPACK-named forms ===========================================================================
@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (2, 0, 3)])
def test_geqrf_of_an_empty_matrix_gives_torchs_empty_result(shape):
    # reshape((-1, m, n)) of no values is ambiguous: NumPy's ValueError came out
    expected = torch.geqrf(torch.zeros(shape))
    for got in (rg.geqrf(rg.zeros(shape)), rg.zeros(shape).geqrf()):
        assert got.a.shape == tuple(expected.a.shape)
        assert got.tau.shape == tuple(expected.tau.shape)


@pytest.mark.parametrize(
    "call, op",
    [
        (lambda a: a.qr(True, 1, 2), "qr"),
        (lambda a: a.svd(full=True), "svd"),
        (lambda a: a.lu_solve(), "lu_solve"),
        (lambda a: a.geqrf(1), "geqrf"),
        (lambda a: rg.ormqr(a), "ormqr"),
    ],
)
def test_the_lapack_named_tensor_forms_name_themselves_on_arguments_they_cannot_take(call, op):
    # installed on Tensor after its methods were guarded: Python's TypeError came out bare
    a = rg.tensor([[2.0, 1.0], [1.0, 3.0]])
    with pytest.raises(rg.DTypeError, match=rf"^{op}: invalid arguments"):
        call(a)
    q, r = a.qr()
    np.testing.assert_allclose((q @ r).numpy(), a.numpy(), atol=1e-6)


# == process-wide settings ========================================================================
@pytest.mark.parametrize("value", ["numpy", rg.NumpyBackend, 3])
def test_set_default_backend_refuses_what_is_not_a_backend_and_keeps_the_one_it_had(value):
    # it kept the str, and every later op failed far away ("'str' object has no attribute ...")
    before = rg.default_backend()
    with pytest.raises(rg.DTypeError, match=r"set_default_backend: expected a backend"):
        rg.set_default_backend(value)
    assert rg.default_backend() is before
    assert (rg.ones(2) + 1).tolist() == [2.0, 2.0]


def test_use_backend_refuses_what_is_not_a_backend():
    with pytest.raises(rg.DTypeError, match=r"use_backend: expected a backend"):
        rg.use_backend("numpy").__enter__()
    assert (rg.ones(2) * 3).tolist() == [3.0, 3.0]


def test_rg_random_manual_seed_of_a_str_is_the_hierarchys_error():
    with pytest.raises(ValueError):  # torch's
        torch.random.manual_seed("a")
    # rg.manual_seed was guarded, its rg.random twin gave int()'s bare ValueError
    with pytest.raises(rg.InvalidArgumentError, match=r"random\.manual_seed: invalid arguments"):
        rg.random.manual_seed("a")
    rg.random.manual_seed(3)
    first = rg.randn(2).tolist()
    rg.random.manual_seed(3)
    assert rg.randn(2).tolist() == first


# == layers =======================================================================================
@pytest.mark.parametrize("factor", [2.5, 2.0, True])
def test_pixel_shuffle_refuses_a_factor_that_is_not_an_int_as_torch_does(factor):
    x = torch.randn(1, 4, 2, 2)
    with pytest.raises(TypeError):
        torch.nn.functional.pixel_shuffle(x, factor)
    with pytest.raises(TypeError):
        torch.nn.functional.pixel_unshuffle(x, factor)
    # int(2.5) = 2 gave a tensor shuffled by 2, silently
    with pytest.raises(rg.DTypeError, match=r"pixel_shuffle: upscale_factor must be an int"):
        nn.PixelShuffle(factor)(rg.tensor(x.numpy()))
    with pytest.raises(rg.DTypeError, match=r"pixel_unshuffle: downscale_factor must be an int"):
        F.pixel_unshuffle(rg.tensor(x.numpy()), factor)


@pytest.mark.parametrize("factor", [0, -1])
def test_pixel_shuffle_refuses_a_factor_below_one_by_name(factor):
    x = rg.ones(1, 4, 2, 2)
    with pytest.raises(RuntimeError, match="expects a positive upscale_factor"):
        torch.nn.functional.pixel_shuffle(torch.ones(1, 4, 2, 2), factor)
    with pytest.raises(rg.InvalidArgumentError, match=r"pixel_shuffle: expects a positive"):
        F.pixel_shuffle(x, factor)
    with pytest.raises(rg.InvalidArgumentError, match=r"pixel_unshuffle: expects a positive"):
        F.pixel_unshuffle(x, factor)
    expected = torch.nn.functional.pixel_shuffle(torch.arange(16.0).reshape(1, 4, 2, 2), 2)
    got = F.pixel_shuffle(rg.arange(16.0).reshape(1, 4, 2, 2), 2)
    assert got.tolist() == expected.tolist()


@pytest.mark.parametrize("shape", [(2, 3, 4, 4, 4), (3, 4)])
def test_softmax2d_refuses_inputs_that_are_not_3d_or_4d_as_torch_does(shape):
    with pytest.raises(ValueError, match="expected input to be 3D or 4D"):
        torch.nn.Softmax2d()(torch.ones(shape))
    # dim -3 of a 5D input is no channel dim: it gave a softmax over the wrong axis
    with pytest.raises(rg.ShapeError, match=r"Softmax2d: expected input to be 3D or 4D"):
        nn.Softmax2d()(rg.ones(shape))
    x = np.random.default_rng(0).standard_normal((2, 3, 2, 2)).astype(np.float32)
    expected = torch.nn.Softmax2d()(torch.tensor(x)).numpy()
    np.testing.assert_allclose(nn.Softmax2d()(rg.tensor(x)).numpy(), expected, rtol=1e-5)


# == tensor functions that took what torch refuses ================================================
@pytest.mark.parametrize("dim", [5, -3])
def test_gradient_refuses_a_dim_out_of_range_as_torch_does(dim):
    values = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    with pytest.raises(IndexError, match="Dimension out of range"):
        torch.gradient(torch.tensor(values), dim=dim)
    # ``dim % ndim`` took dim 5 of a matrix for dim 1, silently
    with pytest.raises(rg.ShapeError, match=rf"gradient: dimension {dim} is out of range"):
        rg.gradient(rg.tensor(values), dim=dim)
    (expected,) = torch.gradient(torch.tensor(values), dim=-1)
    (got,) = rg.gradient(rg.tensor(values), dim=-1)
    assert got.tolist() == expected.tolist()


def test_gradient_refuses_a_dim_named_twice_as_torch_does():
    with pytest.raises(RuntimeError, match="appears multiple times"):
        torch.gradient(torch.ones(3, 3), dim=(0, -2))
    with pytest.raises(rg.ShapeError, match=r"gradient: dim \(0, -2\) names a dimension more"):
        rg.gradient(rg.ones(3, 3), dim=(0, -2))


def test_squeeze_refuses_a_dim_named_twice_as_torch_does():
    with pytest.raises(RuntimeError, match="appears multiple times"):
        torch.zeros(1, 3).squeeze((0, -2))
    with pytest.raises(rg.ShapeError, match=r"squeeze: dim \(0, -2\) names a dimension more"):
        rg.zeros(1, 3).squeeze((0, -2))
    assert rg.zeros(1, 3, 1).squeeze((0, 2)).shape == (3,)


def test_cartesian_prod_refuses_a_tensor_that_is_not_1d_as_torch_does():
    with pytest.raises(RuntimeError, match="Expect a 1D vector"):
        torch.cartesian_prod(torch.ones(2, 3))
    # one matrix came back as itself, the product of several flattened them
    with pytest.raises(rg.ShapeError, match=r"cartesian_prod: expects 1-d tensors, got shape"):
        rg.cartesian_prod(rg.ones(2, 3))
    with pytest.raises(rg.ShapeError, match=r"cartesian_prod: expects 1-d tensors"):
        rg.cartesian_prod(rg.arange(2), rg.ones(2, 2))
    expected = torch.cartesian_prod(torch.arange(2), torch.arange(3))
    assert rg.cartesian_prod(rg.arange(2), rg.arange(3)).tolist() == expected.tolist()


@pytest.mark.parametrize("shapes", [[(4,), (4,)], [(2, 2, 2), (2, 2, 2)], [()]])
def test_chain_matmul_refuses_what_is_not_a_matrix_as_torch_does(shapes):
    with pytest.raises(RuntimeError, match="expected 2 instead"):
        torch.chain_matmul(*(torch.ones(s) for s in shapes))
    # matmul's vector and batch forms answered in its place
    with pytest.raises(rg.ShapeError, match=r"chain_matmul: expects 2-d matrices"):
        rg.chain_matmul(*(rg.ones(s) for s in shapes))


def test_diag_embed_and_flipud_of_a_0d_tensor_are_refused_as_torch_refuses_them():
    with pytest.raises(IndexError):
        torch.diag_embed(torch.tensor(2.0))
    with pytest.raises(RuntimeError, match="Input must be >= 1-d"):
        torch.flipud(torch.tensor(2.0))
    # a [1, 1] matrix and the scalar itself came back
    with pytest.raises(rg.ShapeError, match=r"diag_embed: expects a tensor of at least 1"):
        rg.diag_embed(rg.tensor(2.0))
    with pytest.raises(rg.ShapeError, match=r"flipud: input must be >= 1-d"):
        rg.tensor(2.0).flipud()
    assert rg.diagflat(rg.tensor(2.0)).tolist() == torch.diagflat(torch.tensor(2.0)).tolist()


@pytest.mark.parametrize(
    "values, low, high",
    [([float("nan"), 1.0], 0, 0), ([float("inf"), 1.0], 0, 0), ([1.0, 2.0], 0, float("inf"))],
    ids=["nan", "inf", "given-inf"],
)
def test_histc_over_a_range_that_is_not_finite_is_refused_as_torch_refuses_it(values, low, high):
    with pytest.raises(RuntimeError, match="is not finite"):
        torch.histc(torch.tensor(values), 4, low, high)
    # it counted nothing, or everything in the last bin, silently
    with pytest.raises(rg.InvalidArgumentError, match=r"histc: range of \[.*\] is not finite"):
        rg.histc(rg.tensor(values), 4, low, high)


def test_histc_of_no_bins_names_the_bins():
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        torch.histc(torch.ones(3), 0)
    # it said "'list' argument must have no negative elements" (NumPy's, from inside)
    with pytest.raises(rg.InvalidArgumentError, match=r"histc: bins must be a positive int"):
        rg.histc(rg.ones(3), 0)
    x = np.array([0.0, 1.0, 1.5, 3.0], np.float32)
    assert rg.histc(rg.tensor(x), 3).tolist() == torch.histc(torch.tensor(x), 3).tolist()


# == nn: constructors and containers ==============================================================
@pytest.mark.parametrize("cls", ["Embedding", "EmbeddingBag"])
@pytest.mark.parametrize("padding_idx", [-4, 3, 5])
def test_a_padding_idx_outside_the_table_is_refused_as_torch_refuses_it(cls, padding_idx):
    with pytest.raises(AssertionError, match=r"(?i)padding_idx must be within num_embeddings"):
        getattr(torch.nn, cls)(3, 2, padding_idx=padding_idx)
    # -4 of 3 rows was kept as -1 (another row than any given); 5 gave NumPy's own message
    with pytest.raises(rg.IndexOutOfRangeError, match=rf"{cls}: padding_idx must be within"):
        getattr(nn, cls)(3, 2, padding_idx=padding_idx)
    assert getattr(nn, cls)(3, 2, padding_idx=-3).padding_idx == 0  # as torch's


@pytest.mark.parametrize("delta", [-1.0, 0.0])
def test_huber_loss_refuses_a_delta_that_is_not_positive_as_torch_does(delta):
    with pytest.raises(RuntimeError, match="non-positive values for delta"):
        torch.nn.functional.huber_loss(torch.ones(2), torch.zeros(2), delta=delta)
    # a negative delta gave a negative loss (-1.5 here)
    with pytest.raises(rg.InvalidArgumentError, match=r"huber_loss: delta must be positive"):
        nn.HuberLoss(delta=delta)(rg.ones(2), rg.zeros(2))
    expected = torch.nn.functional.huber_loss(torch.ones(2), torch.zeros(2), delta=0.5)
    assert F.huber_loss(rg.ones(2), rg.zeros(2), delta=0.5).item() == expected.item()


@pytest.mark.parametrize("index", [3, -4])
def test_sequential_insert_refuses_an_index_past_either_end_as_torch_does(index):
    with pytest.raises(IndexError, match="Index out of range"):
        torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Tanh()).insert(index, torch.nn.ReLU())
    model = nn.Sequential(nn.ReLU(), nn.Tanh())
    # list.insert's clamping put it at an end, silently
    with pytest.raises(rg.IndexOutOfRangeError, match=r"Sequential\.insert: index"):
        model.insert(index, nn.Sigmoid())
    assert [type(m).__name__ for m in model] == ["ReLU", "Tanh"]
    assert model.insert(-2, nn.Sigmoid()) is model  # torch's returns the Sequential
    assert [type(m).__name__ for m in model] == ["Sigmoid", "ReLU", "Tanh"]


def test_sequentials_add_and_repeat_as_torchs_do():
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Tanh())
    model = nn.Sequential(nn.Linear(2, 2), nn.Tanh())
    model.load_state_dict({k: v.numpy() for k, v in reference.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)
    # a bare "unsupported operand type(s)" TypeError: the operators were missing
    for ours, theirs in [
        (model * 3, reference * 3),
        (2 * model, 2 * reference),
        (model + model, reference + reference),
    ]:
        assert len(ours) == len(theirs)
        assert ours[0] is model[0]  # the same modules, as torch's: the repeats share weights
        np.testing.assert_allclose(
            ours(rg.tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), rtol=1e-5
        )
    assert len(model) == 2
    with pytest.raises(ValueError, match=r"[Nn]on-positive"):
        reference * 0
    with pytest.raises(rg.InvalidArgumentError, match=r"Sequential: non-positive"):
        model * 0
    with pytest.raises(rg.DTypeError, match=r"Sequential: \* takes an int"):
        model * 1.5
    with pytest.raises(ValueError):
        reference + torch.nn.ModuleList()
    with pytest.raises(rg.InvalidArgumentError, match=r"Sequential: \+ supports only"):
        model + nn.ModuleList()
    repeated = nn.Sequential(nn.ReLU())
    repeated *= 3
    repeated += nn.Sequential(nn.Tanh())
    assert [type(m).__name__ for m in repeated] == ["ReLU", "ReLU", "ReLU", "Tanh"]


# == activation checkpointing calls ===============================================================
def test_checkpoint_of_something_not_callable_names_checkpoint():
    from retrograd.utils.checkpoint import checkpoint

    with pytest.raises(TypeError):  # torch's
        torch.utils.checkpoint.checkpoint(3, torch.ones(2), use_reentrant=False)
    # Python's "'int' object is not callable" came out bare
    with pytest.raises(rg.DTypeError, match=r"checkpoint: function must be callable, got 3"):
        checkpoint(3, rg.ones(2))
    x = rg.tensor([1.0, 2.0], requires_grad=True)
    out = checkpoint(lambda a: (a * a).sum(), x, use_reentrant=False)
    assert x.grad(out.backward()).tolist() == [2.0, 4.0]


@pytest.mark.parametrize("segments", [0, -1, 1.5])
def test_checkpoint_sequential_refuses_segments_that_are_not_a_positive_int(segments):
    from retrograd.utils.checkpoint import checkpoint_sequential

    # the modules ran, whatever segments said (torch's refuses 0 and 1.5 from deep inside)
    with pytest.raises(rg.InvalidArgumentError, match=r"checkpoint_sequential: segments should"):
        checkpoint_sequential(nn.Sequential(nn.ReLU(), nn.Tanh()), segments, rg.ones(2))
    with pytest.raises(rg.DTypeError, match=r"checkpoint_sequential: functions must be iterable"):
        checkpoint_sequential(3, 1, rg.ones(2))
    expected = torch.utils.checkpoint.checkpoint_sequential(
        torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Tanh()),
        2,
        -torch.ones(2),
        use_reentrant=False,
    )
    got = checkpoint_sequential(nn.Sequential(nn.ReLU(), nn.Tanh()), 2, -rg.ones(2))
    assert got.tolist() == expected.tolist()


# == quantile and hstack ==========================================================================
@pytest.mark.parametrize("q", [float("nan"), [0.5, float("nan")]])
def test_quantile_refuses_a_nan_q_by_name_as_torch_does(q):
    values = np.arange(5.0, dtype=np.float32)
    torch_q = q if isinstance(q, float) else torch.tensor(q)
    with pytest.raises(RuntimeError, match=r"q (values )?must be in the range \[0, 1\]"):
        torch.quantile(torch.tensor(values), torch_q)
    # a NaN passed the range check: gather's "index -9223372036854775808" came out
    rg_q = q if isinstance(q, float) else rg.tensor(q)
    with pytest.raises(rg.InvalidArgumentError, match=r"quantile: q values must be in \[0, 1\]"):
        rg.quantile(rg.tensor(values), rg_q)
    expected = torch.quantile(torch.tensor(values), torch.tensor([0.25, 1.0]))
    assert rg.quantile(rg.tensor(values), rg.tensor([0.25, 1.0])).tolist() == expected.tolist()


def test_hstack_joins_0d_tensors_as_torchs_does():
    expected = torch.hstack([torch.tensor(1.0), torch.tensor(2.0), torch.tensor([3.0])])
    # cat along dimension 1 of 0-d tensors was refused
    got = rg.hstack([rg.tensor(1.0), rg.tensor(2.0), rg.tensor([3.0])])
    assert got.tolist() == expected.tolist()
    with pytest.raises(RuntimeError, match="non-empty"):
        torch.hstack([])
    # Python's "list index out of range", as an IndexError, came out
    with pytest.raises(rg.ShapeError, match=r"hstack: expects a non-empty list of tensors"):
        rg.hstack([])


def test_multi_dot_of_one_tensor_is_refused_as_torch_refuses_it():
    with pytest.raises(TypeError, match="must be tuple of Tensors"):
        torch.linalg.multi_dot(torch.ones(2, 3))
    # list() of the tensor took its rows for the operands: the dot of two rows came back
    with pytest.raises(rg.DTypeError, match=r"linalg\.multi_dot: tensors must be a list"):
        rg.linalg.multi_dot(rg.arange(6.0).reshape(2, 3))
    a, b = np.ones((2, 3), np.float32), np.arange(6.0, dtype=np.float32).reshape(3, 2)
    expected = torch.linalg.multi_dot([torch.tensor(a), torch.tensor(b)])
    assert rg.linalg.multi_dot((rg.tensor(a), rg.tensor(b))).tolist() == expected.tolist()


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_ctc_loss_of_padded_targets_with_no_labels_is_torchs(reduction):
    # targets [N, 0] (every target empty): the loss of the blank-only path. The start of the
    # recursion wrote column 1 of a 1-column table: NumPy's IndexError, as an error of ours
    logits = np.random.default_rng(0).standard_normal((4, 3, 5)).astype(np.float32)
    input_lengths = np.array([4, 4, 2])
    expected_input = torch.tensor(logits, requires_grad=True)
    expected = torch.nn.functional.ctc_loss(
        expected_input.log_softmax(2),
        torch.zeros((3, 0), dtype=torch.long),
        torch.tensor(input_lengths),
        torch.zeros(3, dtype=torch.long),
        reduction=reduction,
    )
    expected.sum().backward()
    x = rg.tensor(logits, requires_grad=True)
    got = F.ctc_loss(
        x.log_softmax(2),
        rg.zeros((3, 0), dtype=rg.int64),
        rg.tensor(input_lengths),
        rg.zeros(3, dtype=rg.int64),
        reduction=reduction,
    )
    gradient = x.grad(got.sum().backward())
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(gradient.numpy(), expected_input.grad.numpy(), atol=1e-6)


# == distributions at the edges of their parameters ==============================================
@pytest.mark.parametrize("p, q", [(0.0, 0.5), (1.0, 0.5), (0.0, 0.0)])
def test_kl_of_bernoullis_with_a_certain_outcome_is_torchs(p, q):
    # 0 * log 0 gave NaN where p is 0 or 1 (torch's: 0.693 for p = 0, q = 0.5)
    for p_, q_ in [(p, q), (0.5, 0.0), (0.3, 0.6)]:  # (and as before: infinite, finite)
        expected = torch.distributions.kl_divergence(
            torch.distributions.Bernoulli(probs=torch.tensor(p_)),
            torch.distributions.Bernoulli(probs=torch.tensor(q_)),
        )
        got = rg.distributions.kl_divergence(
            rg.distributions.Bernoulli(probs=rg.tensor(p_)),
            rg.distributions.Bernoulli(probs=rg.tensor(q_)),
        )
        np.testing.assert_allclose(got.item(), expected.item(), rtol=1e-6)


def test_categorical_log_prob_of_a_zero_probability_is_torchs():
    # its logits were log(probs clamped to tiny), -87.3, where torch's are log(eps), -15.9
    expected = torch.distributions.Categorical(probs=torch.tensor([0.0, 0.25, 0.75]))
    got = rg.distributions.Categorical(probs=rg.tensor([0.0, 0.25, 0.75]))
    np.testing.assert_allclose(got.log_prob(rg.tensor(0)).item(), -15.942385, rtol=1e-6)
    np.testing.assert_allclose(got.logits.numpy(), expected.logits.numpy(), rtol=1e-6)
    np.testing.assert_allclose(got.entropy().item(), expected.entropy().item(), rtol=1e-6)


def test_poisson_log_prob_of_a_count_under_a_zero_rate_is_minus_infinity_as_torchs():
    expected = torch.distributions.Poisson(torch.tensor(0.0)).log_prob(torch.tensor([0.0, 1.0]))
    got = rg.distributions.Poisson(rg.tensor(0.0)).log_prob(rg.tensor([0.0, 1.0]))
    assert got.tolist() == expected.tolist() == [0.0, -np.inf]  # it was [0, -87.3]


# == schedules over no iterations =================================================================
@pytest.mark.parametrize("name", ["LinearLR", "ConstantLR", "PolynomialLR"])
def test_a_schedule_over_zero_iterations_keeps_torchs_learning_rates(name):
    # LinearLR and PolynomialLR divided by total_iters=0 (ZeroDivisionError, as an error of
    # ours); ConstantLR gave the base rate where torch's keeps the factor
    reference = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    expected_schedule = getattr(torch.optim.lr_scheduler, name)(reference, total_iters=0)
    optimizer = rg.optim.SGD([nn.Parameter(rg.ones(1))], lr=0.1)
    schedule = getattr(rg.optim.lr_scheduler, name)(optimizer, total_iters=0)
    for _ in range(3):
        np.testing.assert_allclose(schedule.get_last_lr(), expected_schedule.get_last_lr())
        reference.step()
        expected_schedule.step()
        schedule.step()
    np.testing.assert_allclose(optimizer.param_groups[0]["lr"], reference.param_groups[0]["lr"])
