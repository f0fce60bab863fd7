"""Real ports, continued (the harness: ``tests/real_ports.py``), two programs written here:

- normalizing flows on two moons in the style of karpathy/pytorch-normalizing-flows, every kind
  that notebook offers: RealNVP and NICE couplings (``x[:, ::2]``/``x[:, 1::2]`` halves written
  back into ``torch.zeros``, a conditioner defaulting to ``lambda x: x.new_zeros(...)``), a
  learnt affine (``nn.Parameter(torch.randn(1, dim, requires_grad=True))``), ``ActNorm`` (its
  data-dependent init assigning ``self.s.data = ...detach()`` in the first forward), a slow MAF
  (an ``nn.ModuleDict`` keyed by ``str(i)``, a ``LeafParam`` of ``torch.Tensor(1, n)``
  expanded, ``z[:, order[i]] = ...``, ``log_det += s``), MAF over a MADE (an ``nn.Linear``
  subclass with a mask buffer written by ``mask.data.copy_(torch.from_numpy(m.astype(np.uint8)
  .T))``, masks from ``np.random.RandomState``, ``split(dim, dim=1)``, ``flip(dims=(1,))``),
  IAF (``forward`` and ``backward`` swapped on the instance, so the sequential inversion through
  ``x.clone()`` and ``x[:, i] = ...`` runs in training), and Glow (``orthogonal_``,
  ``torch.lu_unpack(*Q.lu())``, ``diag()``, ``torch.tril(L, diagonal=-1) +
  torch.diag(torch.ones(dim))``, a plain tensor attribute ``P``, ``torch.inverse``) interleaved
  with ``ActNorm`` through ``itertools.chain(*zip(...))``; a logistic prior
  ``TransformedDistribution(Uniform(...), SigmoidTransform().inv)`` or a ``MultivariateNormal``,
  Adam with ``weight_decay``, ``model.zero_grad()``, the NLL ``-torch.sum(...)``, and each
  trained flow inverted on given latents;
- sparsemax and 1.5-entmax as ``autograd.Function``s in the style of deep-spin/entmax:
  ``ctx.save_for_backward``/``ctx.saved_tensors``, ``ctx.dim``, rank tensors by
  ``torch.arange(1, d + 1, device=, dtype=)`` viewed and transposed, ``torch.sort(descending=
  True)``/``torch.topk``, ``cumsum``, ``gather(dim, size - 1)``, ``tau /= size.to(dtype)``; in
  ``backward`` ``g[out == 0] = 0``, ``dx -= shift * root`` and ``None`` for the extra inputs;
  top-k variants whose unsolved rows recurse with ``2 * k`` and are written back through a
  permuted view, in an attention classifier trained with Adam.

The defect found: retrograd had no LU factorization (``Tensor.lu``, ``torch.lu``,
``torch.lu_unpack``, ``linalg.lu_factor``/``lu_factor_ex``/``lu``), so Glow's
``Invertible1x1Conv`` could not be built. They are now there (``linalg.py``): Gaussian
elimination with LAPACK's partial pivoting written with tensor ops (a ``gather`` per row swap),
so the pivots and factors are LAPACK's and the gradient through ``L`` and ``U`` is torch's; as
torch's, ``lu_factor`` refuses a singular matrix (``lu_factor_ex`` and ``Tensor.lu`` report it in
``info``) and ``pivot=False``. Pivots are int32, as torch's.
The other flows and the entmax functions ran unchanged but for the gradient lines.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both

# -- normalizing flows -----------------------------------------------------------------------------
FLOWS_SOURCE = """
# Density estimation on two moons with a menu of normalizing flows (coupling, autoregressive,
# inverse autoregressive and Glow-style), each invertible with a log-determinant both ways.
import itertools
from torch.distributions import MultivariateNormal, TransformedDistribution, Uniform
from torch.distributions.transforms import SigmoidTransform


class MaskedDense(nn.Linear):
    def __init__(self, n_in, n_out, bias=True):
        super().__init__(n_in, n_out, bias)
        self.register_buffer("mask", torch.ones(n_out, n_in))

    def set_mask(self, allowed):
        # allowed is (in, out) in NumPy; the buffer is (out, in) like the weight
        self.mask.data.copy_(torch.from_numpy(allowed.astype(np.uint8).T))

    def forward(self, x):
        return F.linear(x, self.mask * self.weight, self.bias)


class MADE(nn.Module):
    # an MLP whose masks make output j depend only on inputs before j in a fixed order
    def __init__(self, n_in, hidden, n_out, seed=0):
        super().__init__()
        sizes = [n_in] + hidden + [n_out]
        layers = []
        for a, b in zip(sizes, sizes[1:]):
            layers += [MaskedDense(a, b), nn.ReLU()]
        self.net = nn.Sequential(*layers[:-1])
        rng = np.random.RandomState(seed)
        degrees = [np.arange(n_in)]
        for h in hidden:
            degrees.append(rng.randint(degrees[-1].min(), n_in - 1, size=h))
        masks = [d0[:, None] <= d1[None, :] for d0, d1 in zip(degrees, degrees[1:])]
        masks.append(degrees[-1][:, None] < degrees[0][None, :])
        reps = n_out // n_in
        masks[-1] = np.concatenate([masks[-1]] * reps, axis=1)
        for layer, m in zip([l for l in self.net if isinstance(l, MaskedDense)], masks):
            layer.set_mask(m)

    def forward(self, x):
        return self.net(x)


class LeafParam(nn.Module):
    # a learnt constant standing in for a conditioner with no inputs
    def __init__(self, n):
        super().__init__()
        self.p = nn.Parameter(torch.Tensor(1, n))

    def forward(self, x):
        return self.p.expand(x.size(0), -1)


def mlp(n_in, n_out, width):
    return nn.Sequential(nn.Linear(n_in, width), nn.LeakyReLU(0.2), nn.Linear(width, width),
                         nn.LeakyReLU(0.2), nn.Linear(width, n_out))


class Affine(nn.Module):
    def __init__(self, dim, *, scale=True, shift=True):
        super().__init__()
        fresh = lambda: nn.Parameter(torch.randn(1, dim, requires_grad=True))
        self.s = fresh() if scale else None
        self.t = fresh() if shift else None

    def _st(self, x):
        zero = x.new_zeros(x.size())
        return (zero if self.s is None else self.s), (zero if self.t is None else self.t)

    def forward(self, x):
        s, t = self._st(x)
        return x * torch.exp(s) + t, torch.sum(s, dim=1)

    def backward(self, z):
        s, t = self._st(z)
        return (z - t) * torch.exp(-s), torch.sum(-s, dim=1)


class ActNorm(Affine):
    # the first batch sets s and t so that it comes out standardised
    def __init__(self, dim):
        super().__init__(dim)
        self.initialised = False

    def forward(self, x):
        if not self.initialised:
            spread = x.std(dim=0, keepdim=True)
            self.s.data = (-torch.log(spread)).detach()
            centre = (x * torch.exp(self.s)).mean(dim=0, keepdim=True)
            self.t.data = (-centre).detach()
            self.initialised = True
        return super().forward(x)


class Coupling(nn.Module):
    # RealNVP (scale and shift) or NICE (shift only) on one half given the other
    def __init__(self, dim, parity, width, scale=True):
        super().__init__()
        self.dim, self.parity = dim, parity
        half = dim // 2
        no_scale = lambda x: x.new_zeros(x.size(0), half)
        self.scale_net = mlp(half, half, width) if scale else no_scale
        self.shift_net = mlp(half, half, width)

    def _halves(self, x):
        a, b = x[:, ::2], x[:, 1::2]
        return (b, a) if self.parity else (a, b)

    def _join(self, a, b, n):
        if self.parity:
            a, b = b, a
        out = torch.zeros((n, self.dim))
        out[:, ::2] = a
        out[:, 1::2] = b
        return out

    def forward(self, x):
        keep, move = self._halves(x)
        s = self.scale_net(keep)
        moved = torch.exp(s) * move + self.shift_net(keep)
        return self._join(keep, moved, x.shape[0]), torch.sum(s, dim=1)

    def backward(self, z):
        keep, move = self._halves(z)
        s = self.scale_net(keep)
        moved = (move - self.shift_net(keep)) * torch.exp(-s)
        return self._join(keep, moved, z.shape[0]), torch.sum(-s, dim=1)


class SlowMAF(nn.Module):
    # one conditioner per dimension, looked up by name
    def __init__(self, dim, parity, width):
        super().__init__()
        self.dim = dim
        self.conditioners = nn.ModuleDict({str(0): LeafParam(2)})
        for i in range(1, dim):
            self.conditioners[str(i)] = mlp(i, 2, width)
        self.order = list(range(dim))
        if not parity:
            self.order.reverse()

    def forward(self, x):
        z, log_det = torch.zeros_like(x), torch.zeros(x.size(0))
        for i in range(self.dim):
            st = self.conditioners[str(i)](x[:, :i])
            z[:, self.order[i]] = x[:, i] * torch.exp(st[:, 0]) + st[:, 1]
            log_det += st[:, 0]
        return z, log_det

    def backward(self, z):
        x, log_det = torch.zeros_like(z), torch.zeros(z.size(0))
        for i in range(self.dim):
            st = self.conditioners[str(i)](x[:, :i])
            x[:, i] = (z[:, self.order[i]] - st[:, 1]) * torch.exp(-st[:, 0])
            log_det += -st[:, 0]
        return x, log_det


class MAF(nn.Module):
    def __init__(self, dim, parity, width):
        super().__init__()
        self.dim, self.parity = dim, parity
        self.made = MADE(dim, [width, width], 2 * dim)

    def forward(self, x):
        s, t = self.made(x).split(self.dim, dim=1)
        z = x * torch.exp(s) + t
        return (z.flip(dims=(1,)) if self.parity else z), torch.sum(s, dim=1)

    def backward(self, z):
        if self.parity:
            z = z.flip(dims=(1,))
        x, log_det = torch.zeros_like(z), torch.zeros(z.size(0))
        for i in range(self.dim):  # one dimension at a time: each needs the ones before
            s, t = self.made(x.clone()).split(self.dim, dim=1)
            x[:, i] = torch.exp(-s[:, i]) * (z[:, i] - t[:, i])
            log_det += -s[:, i]
        return x, log_det


class IAF(MAF):
    # the same network run the other way: sampling is fast, density is sequential
    def __init__(self, dim, parity, width):
        super().__init__(dim, parity, width)
        density, sampling = self.forward, self.backward
        self.forward, self.backward = sampling, density  # bound methods set on the instance


class Invertible1x1(nn.Module):
    # a learnt rotation in LU form: P fixed, L unit lower, U upper with its diagonal apart
    def __init__(self, dim):
        super().__init__()
        self.dim = dim
        rotation = torch.nn.init.orthogonal_(torch.randn(dim, dim))
        perm, lower, upper = torch.lu_unpack(*rotation.lu())
        self.P = perm  # a plain attribute: not learnt, not in the state dict
        self.L = nn.Parameter(lower)
        self.S = nn.Parameter(upper.diag())
        self.U = nn.Parameter(torch.triu(upper, diagonal=1))

    def _matrix(self):
        lower = torch.tril(self.L, diagonal=-1) + torch.diag(torch.ones(self.dim))
        return self.P @ lower @ (torch.triu(self.U, diagonal=1) + torch.diag(self.S))

    def forward(self, x):
        return x @ self._matrix(), torch.sum(torch.log(torch.abs(self.S)))

    def backward(self, z):
        return z @ torch.inverse(self._matrix()), -torch.sum(torch.log(torch.abs(self.S)))


class FlowModel(nn.Module):
    def __init__(self, prior, steps):
        super().__init__()
        self.prior = prior
        self.flow = nn.Module()
        self.flow.flows = nn.ModuleList(steps)

    def forward(self, x):
        log_det = torch.zeros(x.shape[0])
        for f in self.flow.flows:
            x, ld = f.forward(x)
            log_det += ld
        return x, self.prior.log_prob(x).view(x.size(0), -1).sum(1), log_det

    def backward(self, z):
        log_det, path = torch.zeros(z.shape[0]), [z]
        for f in self.flow.flows[::-1]:
            z, ld = f.backward(z)
            log_det += ld
            path.append(z)
        return path, log_det


def make_flows(kind):
    if kind == "RealNVP":
        return [Coupling(2, i % 2, 8) for i in range(3)]
    if kind == "NICE":
        return [Coupling(2, i % 2, 8, scale=False) for i in range(4)] + [Affine(2, shift=False)]
    if kind in ("SlowMAF", "MAF", "IAF"):
        return [{"SlowMAF": SlowMAF, "MAF": MAF, "IAF": IAF}[kind](2, i % 2, 8) for i in range(3)]
    if kind == "ActNorm+RealNVP":
        couplings = [Coupling(2, i % 2, 8) for i in range(3)]
        return list(itertools.chain(*zip([ActNorm(2) for _ in couplings], couplings)))
    rotations = [Invertible1x1(2) for _ in range(2)]
    norms, couplings = [ActNorm(2) for _ in rotations], [Coupling(2, i % 2, 8) for i in range(2)]
    return list(itertools.chain(*zip(norms, rotations, couplings)))


def build(kind, logistic):
    if logistic:  # the logistic distribution: a uniform pushed through the logit
        unit = Uniform(torch.zeros(2), torch.ones(2))
        prior = TransformedDistribution(unit, SigmoidTransform().inv)
    else:
        prior = MultivariateNormal(torch.zeros(2), covariance_matrix=torch.eye(2))
    return FlowModel(prior, make_flows(kind))


def train(model, batches, codes):
    seen = []
    optimizer = optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-5)
    print("parameters:", sum(p.numel() for p in model.parameters()))
    model.train()
    for x in batches:
        _, prior_lp, log_det = model(x)
        nll = -torch.sum(prior_lp + log_det)
        model.zero_grad()
        nll.backward()
        optimizer.step()
        seen.append(nll.item())
    model.eval()
    path, log_det = model.backward(codes)
    seen += [path[-1].detach().numpy().copy(), log_det.detach().numpy().copy()]
    seen.append({n: v.detach().numpy().copy() for n, v in model.state_dict().items()})
    return seen
"""

FLOWS_STEP = [
    (
        "        nll.backward()\n        optimizer.step()",
        "        grads = nll.backward()\n        optimizer.step(grads)",
    ),
]

KINDS = ["RealNVP", "NICE", "SlowMAF", "MAF", "IAF", "ActNorm+RealNVP", "Glow"]


@pytest.mark.parametrize("kind", KINDS)
def test_normalizing_flows_in_the_karpathy_style_match_torch(capsys, kind):
    theirs, ours = both(FLOWS_SOURCE, FLOWS_STEP)
    rng = np.random.default_rng(KINDS.index(kind))
    angles = rng.uniform(0, 2 * np.pi, (4, 16))
    noise = [0.05 * rng.standard_normal((16, 2)) for _ in angles]
    moons = [
        np.stack([np.cos(a), np.sin(a) - 0.5 * (a > np.pi)], 1) + e for a, e in zip(angles, noise)
    ]
    latents = rng.standard_normal((5, 2))
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        with torch.random.fork_rng():
            torch.manual_seed(0)
            model = names["build"](kind, logistic=kind != "MAF")
        if initial is None:
            with torch.no_grad():  # LeafParam's torch.Tensor(1, n) is uninitialized memory
                for module in model.modules():
                    if type(module).__name__ == "LeafParam":
                        module.p.normal_()
            initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
            # Glow's permutation is a plain attribute, outside the state
            plain = [f.P.numpy().copy() for f in model.flow.flows if hasattr(f, "P")]
        else:
            model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
            for f, p in zip([f for f in model.flow.flows if hasattr(f, "P")], plain):
                f.P = rg.tensor(p)
        batches = [lib.tensor(b, dtype=lib.float32) for b in moons]
        records.append(names["train"](model, batches, lib.tensor(latents, dtype=lib.float32)))
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


# -- entmax ----------------------------------------------------------------------------------------
ENTMAX_SOURCE = """
# Sparse attention: sparsemax and 1.5-entmax as custom autograd Functions, with top-k
# variants that sort only k entries and retry the rows whose support fills them.
from torch import autograd


def ranks_like(x, dim):
    # 1..d along dim, shaped to broadcast against x
    r = torch.arange(1, x.size(dim) + 1, device=x.device, dtype=x.dtype)
    shape = [1] * x.dim()
    shape[0] = -1
    return r.view(shape).transpose(0, dim)


def dim_last(x, dim):
    # a view with dim moved last (writes through it land in x)
    if dim == -1:
        return x
    order = [i for i in range(x.dim()) if i != dim % x.dim()] + [dim % x.dim()]
    return x.permute(order)


def leading(x, dim, k):
    if k is None or k >= x.shape[dim]:
        return torch.sort(x, dim=dim, descending=True)[0]
    return torch.topk(x, k=k, dim=dim)[0]


def sparsemax_threshold(x, dim, k=None):
    top = leading(x, dim, k)
    excess = top.cumsum(dim) - 1
    size = (ranks_like(top, dim) * top > excess).sum(dim=dim).unsqueeze(dim)
    tau = excess.gather(dim, size - 1)
    tau /= size.to(x.dtype)
    if k is not None:
        full = (size == k).squeeze(dim)  # the true support may be larger than k
        if torch.any(full):
            tau_more, size_more = sparsemax_threshold(dim_last(x, dim)[full], -1, 2 * k)
            dim_last(tau, dim)[full] = tau_more
            dim_last(size, dim)[full] = size_more
    return tau, size


def entmax_threshold(x, dim, k=None):
    top = leading(x, dim, k)
    r = ranks_like(top, dim)
    mean, mean_sq = top.cumsum(dim) / r, (top**2).cumsum(dim) / r
    gap = torch.clamp((1 - r * (mean_sq - mean**2)) / r, 0)
    tau_all = mean - torch.sqrt(gap)
    size = (tau_all <= top).sum(dim).unsqueeze(dim)
    tau = tau_all.gather(dim, size - 1)
    if k is not None:
        full = (size == k).squeeze(dim)
        if torch.any(full):
            tau_more, size_more = entmax_threshold(dim_last(x, dim)[full], -1, 2 * k)
            dim_last(tau, dim)[full] = tau_more
            dim_last(size, dim)[full] = size_more
    return tau, size


class Sparsemax(autograd.Function):
    @staticmethod
    def forward(ctx, x, dim=-1, k=None):
        ctx.dim = dim
        x = x - x.max(dim=dim, keepdim=True)[0]
        tau, size = sparsemax_threshold(x, dim, k)
        out = torch.clamp(x - tau, min=0)
        ctx.save_for_backward(size, out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        size, out = ctx.saved_tensors
        g = grad_out.clone()
        g[out == 0] = 0
        mean = (g.sum(dim=ctx.dim) / size.to(out.dtype).squeeze()).unsqueeze(ctx.dim)
        return torch.where(out != 0, g - mean, g), None, None


class Entmax15(autograd.Function):
    @staticmethod
    def forward(ctx, x, dim=-1, k=None):
        ctx.dim = dim
        x = (x - x.max(dim=dim, keepdim=True)[0]) / 2
        tau, _ = entmax_threshold(x, dim, k)
        y = torch.clamp(x - tau, min=0) ** 2
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        root = y.sqrt()
        dx = dy * root
        shift = (dx.sum(ctx.dim) / root.sum(ctx.dim)).unsqueeze(ctx.dim)
        dx -= shift * root
        return dx, None, None


MAPPINGS = {
    "sparsemax": lambda s: Sparsemax.apply(s, -1),
    "sparsemax_topk": lambda s: Sparsemax.apply(s, -1, 2),
    "entmax15": lambda s: Entmax15.apply(s, 1),
    "entmax15_topk": lambda s: Entmax15.apply(s, -1, 2),
}


class SparseAttentionClassifier(nn.Module):
    def __init__(self, width, mapping, n_classes=3):
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(width, width) for _ in range(3))
        self.classify = nn.Linear(width, n_classes)
        self.normalise = MAPPINGS[mapping]

    def forward(self, x):
        scores = self.query(x) @ self.key(x).transpose(1, 2) / math.sqrt(x.size(-1))
        weights = self.normalise(scores)
        return self.classify((weights @ self.value(x)).mean(1)), weights


def train(model, xs, ys):
    seen = []
    opt = optim.Adam(model.parameters(), lr=0.05)
    for x, target in zip(xs, ys):
        logits, weights = model(x)
        loss = F.cross_entropy(logits, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen += [loss.item(), weights.detach().numpy().copy()]
    seen.append({n: v.detach().numpy().copy() for n, v in model.state_dict().items()})
    return seen
"""

ENTMAX_STEP = [
    (
        "        loss.backward()\n        opt.step()",
        "        grads = loss.backward()\n        opt.step(grads)",
    ),
]


@pytest.mark.parametrize("mapping", ["sparsemax", "sparsemax_topk", "entmax15", "entmax15_topk"])
def test_entmax_functions_in_training_match_torch(mapping):
    theirs, ours = both(ENTMAX_SOURCE, ENTMAX_STEP)
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((3, 5, 6)) * 2 for _ in range(4)]
    ys = [rng.integers(0, 3, 3) for _ in range(4)]
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        torch.manual_seed(0)
        model = names["SparseAttentionClassifier"](6, mapping).double()
        if initial is None:
            initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        else:
            model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
        records.append(
            names["train"](model, [lib.tensor(x) for x in xs], [lib.tensor(y) for y in ys])
        )
    # the key's bias adds one constant to each row of scores, which sparsemax and entmax take
    # out (as softmax does): its true gradient is 0, Adam's steps on it follow rounding noise
    assert_records_agree(records[1], records[0], rtol=1e-6, atol=1e-9, skip=["key.bias"])


# -- the LU factorization Glow needed --------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (4, 3), (3, 5), (1, 1), (2, 1, 3, 3)])
def test_lu_factor_unpack_and_gradient_as_torch_s(shape):
    """``linalg.lu_factor``'s LU and LAPACK pivots, ``lu_unpack``'s P, L, U, ``linalg.lu``
    and its gradient through L and U, on square, batched and rectangular matrices."""
    rng = np.random.default_rng(sum(shape))
    a = rng.standard_normal(shape)
    lu_t, pivots = torch.linalg.lu_factor(torch.tensor(a))
    ours_lu, ours_pivots = rg.linalg.lu_factor(rg.tensor(a))
    np.testing.assert_allclose(ours_lu.numpy(), lu_t.numpy(), rtol=1e-12, atol=1e-14)
    assert ours_pivots.tolist() == pivots.tolist()
    for mine, theirs in zip(rg.lu_unpack(ours_lu, ours_pivots), torch.lu_unpack(lu_t, pivots)):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-14)

    ta = torch.tensor(a, requires_grad=True)
    _, low, up = torch.linalg.lu(ta)
    wl, wu = rng.standard_normal(tuple(low.shape)), rng.standard_normal(tuple(up.shape))
    ((low * torch.tensor(wl)).sum() + (up * torch.tensor(wu)).sum()).backward()
    ra = rg.tensor(a).requires_grad_()
    _, low, up = rg.linalg.lu(ra)
    grads = ((low * rg.tensor(wl)).sum() + (up * rg.tensor(wu)).sum()).backward()
    np.testing.assert_allclose(ra.grad(grads).numpy(), ta.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_tensor_lu_forms_and_bad_input():
    a = [[0.0, 2.0, 1.0], [1.0, 1.0, 0.0], [2.0, 0.0, 0.0]]
    theirs = torch.tensor(a).lu(get_infos=True)
    ours = rg.tensor(a).lu(get_infos=True)
    np.testing.assert_allclose(ours[0].numpy(), theirs[0].numpy(), rtol=1e-6)
    assert ours[1].tolist() == theirs[1].tolist() and ours[2].tolist() == theirs[2].tolist()
    assert [t.tolist() for t in rg.lu(rg.tensor(a))] == [t.tolist() for t in ours[:2]]
    # singular matrices: factored by lu_factor_ex and Tensor.lu with LAPACK's info (a zero
    # column below its pivot left unscaled), refused by lu_factor, as torch's
    for singular in ([[1.0, 2.0], [2.0, 4.0]], [[0.0, 0.0, 1.0], [0.0, 0.0, 2.0], [0.0, 1.0, 0.0]]):
        theirs = torch.linalg.lu_factor_ex(torch.tensor(singular))
        ours = rg.linalg.lu_factor_ex(rg.tensor(singular))
        np.testing.assert_allclose(ours.LU.numpy(), theirs.LU.numpy())
        assert ours.pivots.tolist() == theirs.pivots.tolist()
        assert ours.info.tolist() == theirs.info.tolist() != 0
        assert rg.tensor(singular).lu(get_infos=True)[2].tolist() == theirs.info.tolist()
        with pytest.raises(RuntimeError, match="is zero"):
            torch.linalg.lu_factor(torch.tensor(singular))
        with pytest.raises(rg.errors.InvalidArgumentError, match="is zero"):
            rg.linalg.lu_factor(rg.tensor(singular))
    with pytest.raises(rg.errors.InvalidArgumentError, match="without pivoting"):
        rg.linalg.lu_factor(rg.tensor(a), pivot=False)
    with pytest.raises(rg.ShapeError, match="lu_unpack"):
        rg.lu_unpack(rg.tensor(a), rg.tensor([1, 2], dtype=rg.int32))
    with pytest.raises(rg.DTypeError, match="int32"):  # torch's pivots' dtype only
        rg.lu_unpack(*rg.linalg.lu_factor(rg.tensor(a))[:1], rg.tensor([1, 2, 3]))
    with pytest.raises(rg.DTypeError, match="lu_factor"):
        rg.linalg.lu_factor(rg.tensor([[1, 2], [3, 4]]))
