# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- karpathy/pytorch-normalizing-flows (``nflib/flows.py``, ``nflib/nets.py``, ``nflib/made.py``
  and the training cell of ``nflow.ipynb``), every flow the notebook offers: RealNVP and NICE
  (``AffineHalfFlow``: ``x[:,::2]``/``x[:,1::2]`` halves written back by ``z[:,::2] = z0`` into
  ``torch.zeros``, conditioners defaulting to ``lambda x: x.new_zeros(...)``),
  ``AffineConstantFlow`` (``nn.Parameter(torch.randn(1, dim, requires_grad=True))``), ``ActNorm``
  (its data-dependent init assigning ``self.s.data = (-torch.log(x.std(dim=0,
  keepdim=True))).detach()`` in the first forward), ``SlowMAF`` (an ``nn.ModuleDict`` keyed by
  ``str(i)``, ``LeafParam`` of ``torch.Tensor(1, n)`` expanded, ``z[:, self.order[i]] = ...`` and
  ``log_det += s``), ``MAF`` over ``MADE`` (``MaskedLinear(nn.Linear)`` with a mask buffer
  written by ``self.mask.data.copy_(torch.from_numpy(mask.astype(np.uint8).T))``, masks from
  ``np.random.RandomState``, ``st.split(self.dim, dim=1)``, ``z.flip(dims=(1,))``), ``IAF``
  (``self.forward, self.backward = self.backward, self.forward`` on the instance, so the
  sequential inversion runs in training, through ``x.clone()`` and ``x[:, i] = ...``), and
  Glow (``Invertible1x1Conv``: ``torch.nn.init.orthogonal_``, ``torch.lu_unpack(*Q.lu())``,
  ``U.diag()``, ``torch.tril(self.L, diagonal=-1) + torch.diag(torch.ones(self.dim))``, a plain
  tensor attribute ``self.P``, ``torch.inverse``), interleaved with ``ActNorm`` through
  ``itertools.chain(*zip(norms, flows, couplings))``; ``NormalizingFlowModel`` under the
  logistic prior ``TransformedDistribution(Uniform(torch.zeros(2), torch.ones(2)),
  SigmoidTransform().inv)``, Adam with ``weight_decay``, ``model.zero_grad()``, the NLL
  ``-torch.sum(logprob)``; and each trained flow inverted (``model.backward``) on given latents;
- the sparsemax and 1.5-entmax ``autograd.Function``s of deep-spin/entmax
  (``entmax/activations.py``): ``ctx.save_for_backward``/``ctx.saved_tensors``, ``ctx.dim``,
  ``_make_ix_like`` (``torch.arange(1, d + 1, device=, dtype=)`` viewed and transposed),
  ``torch.sort(descending=True)``, ``cumsum``, ``gather(dim, support_size - 1)``, ``tau /=
  support_size.to(input.dtype)``; in ``backward`` ``grad_input[output == 0] = 0``, ``dX -= q *
  gppr`` and ``None`` for ``dim``; the top-k variants whose unsolved rows recurse with ``2 * k``
  and are written back through a permuted view (``_roll_last(tau, dim)[unsolved] = tau_``), in
  an attention layer trained with Adam.

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
FLOWS_SOURCE = '''
import itertools
from torch.distributions import MultivariateNormal, Uniform, TransformedDistribution, SigmoidTransform


class MaskedLinear(nn.Linear):
    """ same as Linear except has a configurable mask on the weights """

    def __init__(self, in_features, out_features, bias=True):
        super().__init__(in_features, out_features, bias)
        self.register_buffer('mask', torch.ones(out_features, in_features))

    def set_mask(self, mask):
        self.mask.data.copy_(torch.from_numpy(mask.astype(np.uint8).T))

    def forward(self, input):
        return F.linear(input, self.mask * self.weight, self.bias)

class MADE(nn.Module):
    def __init__(self, nin, hidden_sizes, nout, num_masks=1, natural_ordering=False):
        super().__init__()
        self.nin = nin
        self.nout = nout
        self.hidden_sizes = hidden_sizes
        assert self.nout % self.nin == 0, "nout must be integer multiple of nin"

        # define a simple MLP neural net
        self.net = []
        hs = [nin] + hidden_sizes + [nout]
        for h0,h1 in zip(hs, hs[1:]):
            self.net.extend([
                    MaskedLinear(h0, h1),
                    nn.ReLU(),
                ])
        self.net.pop() # pop the last ReLU for the output layer
        self.net = nn.Sequential(*self.net)

        # seeds for orders/connectivities of the model ensemble
        self.natural_ordering = natural_ordering
        self.num_masks = num_masks
        self.seed = 0 # for cycling through num_masks orderings

        self.m = {}
        self.update_masks() # builds the initial self.m connectivity
        # note, we could also precompute the masks and cache them, but this
        # could get memory expensive for large number of masks.

    def update_masks(self):
        if self.m and self.num_masks == 1: return # only a single seed, skip for efficiency
        L = len(self.hidden_sizes)

        # fetch the next seed and construct a random stream
        rng = np.random.RandomState(self.seed)
        self.seed = (self.seed + 1) % self.num_masks

        # sample the order of the inputs and the connectivity of all neurons
        self.m[-1] = np.arange(self.nin) if self.natural_ordering else rng.permutation(self.nin)
        for l in range(L):
            self.m[l] = rng.randint(self.m[l-1].min(), self.nin-1, size=self.hidden_sizes[l])

        # construct the mask matrices
        masks = [self.m[l-1][:,None] <= self.m[l][None,:] for l in range(L)]
        masks.append(self.m[L-1][:,None] < self.m[-1][None,:])

        # handle the case where nout = nin * k, for integer k > 1
        if self.nout > self.nin:
            k = int(self.nout / self.nin)
            # replicate the mask across the other outputs
            masks[-1] = np.concatenate([masks[-1]]*k, axis=1)

        # set the masks in all MaskedLinear layers
        layers = [l for l in self.net.modules() if isinstance(l, MaskedLinear)]
        for l,m in zip(layers, masks):
            l.set_mask(m)

    def forward(self, x):
        return self.net(x)


class LeafParam(nn.Module):
    """
    just ignores the input and outputs a parameter tensor, lol
    todo maybe this exists in PyTorch somewhere?
    """
    def __init__(self, n):
        super().__init__()
        self.p = nn.Parameter(torch.Tensor(1,n))

    def forward(self, x):
        return self.p.expand(x.size(0), self.p.size(1))


class MLP(nn.Module):
    """ a simple 4-layer MLP """

    def __init__(self, nin, nout, nh):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(nin, nh),
            nn.LeakyReLU(0.2),
            nn.Linear(nh, nh),
            nn.LeakyReLU(0.2),
            nn.Linear(nh, nh),
            nn.LeakyReLU(0.2),
            nn.Linear(nh, nout),
        )
    def forward(self, x):
        return self.net(x)

class ARMLP(nn.Module):
    """ a 4-layer auto-regressive MLP, wrapper around MADE net """

    def __init__(self, nin, nout, nh):
        super().__init__()
        self.net = MADE(nin, [nh, nh, nh], nout, num_masks=1, natural_ordering=True)

    def forward(self, x):
        return self.net(x)


class AffineConstantFlow(nn.Module):
    """
    Scales + Shifts the flow by (learned) constants per dimension.
    In NICE paper there is a Scaling layer which is a special case of this where t is None
    """
    def __init__(self, dim, scale=True, shift=True):
        super().__init__()
        self.s = nn.Parameter(torch.randn(1, dim, requires_grad=True)) if scale else None
        self.t = nn.Parameter(torch.randn(1, dim, requires_grad=True)) if shift else None

    def forward(self, x):
        s = self.s if self.s is not None else x.new_zeros(x.size())
        t = self.t if self.t is not None else x.new_zeros(x.size())
        z = x * torch.exp(s) + t
        log_det = torch.sum(s, dim=1)
        return z, log_det

    def backward(self, z):
        s = self.s if self.s is not None else z.new_zeros(z.size())
        t = self.t if self.t is not None else z.new_zeros(z.size())
        x = (z - t) * torch.exp(-s)
        log_det = torch.sum(-s, dim=1)
        return x, log_det


class ActNorm(AffineConstantFlow):
    """
    Really an AffineConstantFlow but with a data-dependent initialization,
    where on the very first batch we clever initialize the s,t so that the output
    is unit gaussian. As described in Glow paper.
    """
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.data_dep_init_done = False

    def forward(self, x):
        # first batch is used for init
        if not self.data_dep_init_done:
            assert self.s is not None and self.t is not None # for now
            self.s.data = (-torch.log(x.std(dim=0, keepdim=True))).detach()
            self.t.data = (-(x * torch.exp(self.s)).mean(dim=0, keepdim=True)).detach()
            self.data_dep_init_done = True
        return super().forward(x)


class AffineHalfFlow(nn.Module):
    """
    As seen in RealNVP, affine autoregressive flow (z = x * exp(s) + t), where half of the
    dimensions in x are linearly scaled/transfromed as a function of the other half.
    Which half is which is determined by the parity bit.
    - RealNVP both scales and shifts (default)
    - NICE only shifts
    """
    def __init__(self, dim, parity, net_class=MLP, nh=24, scale=True, shift=True):
        super().__init__()
        self.dim = dim
        self.parity = parity
        self.s_cond = lambda x: x.new_zeros(x.size(0), self.dim // 2)
        self.t_cond = lambda x: x.new_zeros(x.size(0), self.dim // 2)
        if scale:
            self.s_cond = net_class(self.dim // 2, self.dim // 2, nh)
        if shift:
            self.t_cond = net_class(self.dim // 2, self.dim // 2, nh)

    def forward(self, x):
        x0, x1 = x[:,::2], x[:,1::2]
        if self.parity:
            x0, x1 = x1, x0
        s = self.s_cond(x0)
        t = self.t_cond(x0)
        z0 = x0 # untouched half
        z1 = torch.exp(s) * x1 + t # transform this half as a function of the other
        if self.parity:
            z0, z1 = z1, z0
        z = torch.zeros((x.shape[0], self.dim))
        z[:,::2] = z0
        z[:,1::2] = z1
        log_det = torch.sum(s, dim=1)
        return z, log_det

    def backward(self, z):
        z0, z1 = z[:,::2], z[:,1::2]
        if self.parity:
            z0, z1 = z1, z0
        s = self.s_cond(z0)
        t = self.t_cond(z0)
        x0 = z0 # this was the same
        x1 = (z1 - t) * torch.exp(-s) # reverse the transform on this half
        if self.parity:
            x0, x1 = x1, x0
        x = torch.zeros((z.shape[0], self.dim))
        x[:,::2] = x0
        x[:,1::2] = x1
        log_det = torch.sum(-s, dim=1)
        return x, log_det


class SlowMAF(nn.Module):
    """
    Masked Autoregressive Flow, slow version with explicit networks per dim
    """
    def __init__(self, dim, parity, net_class=MLP, nh=24):
        super().__init__()
        self.dim = dim
        self.layers = nn.ModuleDict()
        self.layers[str(0)] = LeafParam(2)
        for i in range(1, dim):
            self.layers[str(i)] = net_class(i, 2, nh)
        self.order = list(range(dim)) if parity else list(range(dim))[::-1]

    def forward(self, x):
        z = torch.zeros_like(x)
        log_det = torch.zeros(x.size(0))
        for i in range(self.dim):
            st = self.layers[str(i)](x[:, :i])
            s, t = st[:, 0], st[:, 1]
            z[:, self.order[i]] = x[:, i] * torch.exp(s) + t
            log_det += s
        return z, log_det

    def backward(self, z):
        x = torch.zeros_like(z)
        log_det = torch.zeros(z.size(0))
        for i in range(self.dim):
            st = self.layers[str(i)](x[:, :i])
            s, t = st[:, 0], st[:, 1]
            x[:, i] = (z[:, self.order[i]] - t) * torch.exp(-s)
            log_det += -s
        return x, log_det

class MAF(nn.Module):
    """ Masked Autoregressive Flow that uses a MADE-style network for fast forward """

    def __init__(self, dim, parity, net_class=ARMLP, nh=24):
        super().__init__()
        self.dim = dim
        self.net = net_class(dim, dim*2, nh)
        self.parity = parity

    def forward(self, x):
        # here we see that we are evaluating all of z in parallel, so density estimation will be fast
        st = self.net(x)
        s, t = st.split(self.dim, dim=1)
        z = x * torch.exp(s) + t
        # reverse order, so if we stack MAFs correct things happen
        z = z.flip(dims=(1,)) if self.parity else z
        log_det = torch.sum(s, dim=1)
        return z, log_det

    def backward(self, z):
        # we have to decode the x one at a time, sequentially
        x = torch.zeros_like(z)
        log_det = torch.zeros(z.size(0))
        z = z.flip(dims=(1,)) if self.parity else z
        for i in range(self.dim):
            st = self.net(x.clone()) # clone to avoid in-place op errors if using IAF
            s, t = st.split(self.dim, dim=1)
            x[:, i] = (z[:, i] - t[:, i]) * torch.exp(-s[:, i])
            log_det += -s[:, i]
        return x, log_det

class IAF(MAF):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        """
        reverse the flow, giving an Inverse Autoregressive Flow (IAF) instead,
        where sampling will be fast but density estimation slow
        """
        self.forward, self.backward = self.backward, self.forward


class Invertible1x1Conv(nn.Module):
    """
    As introduced in Glow paper.
    """

    def __init__(self, dim):
        super().__init__()
        self.dim = dim
        Q = torch.nn.init.orthogonal_(torch.randn(dim, dim))
        P, L, U = torch.lu_unpack(*Q.lu())
        self.P = P # remains fixed during optimization
        self.L = nn.Parameter(L) # lower triangular portion
        self.S = nn.Parameter(U.diag()) # "crop out" the diagonal to its own parameter
        self.U = nn.Parameter(torch.triu(U, diagonal=1)) # "crop out" diagonal, stored in S

    def _assemble_W(self):
        """ assemble W from its pieces (P, L, U, S) """
        L = torch.tril(self.L, diagonal=-1) + torch.diag(torch.ones(self.dim))
        U = torch.triu(self.U, diagonal=1)
        W = self.P @ L @ (U + torch.diag(self.S))
        return W

    def forward(self, x):
        W = self._assemble_W()
        z = x @ W
        log_det = torch.sum(torch.log(torch.abs(self.S)))
        return z, log_det

    def backward(self, z):
        W = self._assemble_W()
        W_inv = torch.inverse(W)
        x = z @ W_inv
        log_det = -torch.sum(torch.log(torch.abs(self.S)))
        return x, log_det

# ------------------------------------------------------------------------

class NormalizingFlow(nn.Module):
    """ A sequence of Normalizing Flows is a Normalizing Flow """

    def __init__(self, flows):
        super().__init__()
        self.flows = nn.ModuleList(flows)

    def forward(self, x):
        m, _ = x.shape
        log_det = torch.zeros(m)
        zs = [x]
        for flow in self.flows:
            x, ld = flow.forward(x)
            log_det += ld
            zs.append(x)
        return zs, log_det

    def backward(self, z):
        m, _ = z.shape
        log_det = torch.zeros(m)
        xs = [z]
        for flow in self.flows[::-1]:
            z, ld = flow.backward(z)
            log_det += ld
            xs.append(z)
        return xs, log_det

class NormalizingFlowModel(nn.Module):
    """ A Normalizing Flow Model is a (prior, flow) pair """

    def __init__(self, prior, flows):
        super().__init__()
        self.prior = prior
        self.flow = NormalizingFlow(flows)

    def forward(self, x):
        zs, log_det = self.flow.forward(x)
        prior_logprob = self.prior.log_prob(zs[-1]).view(x.size(0), -1).sum(1)
        return zs, prior_logprob, log_det

    def backward(self, z):
        xs, log_det = self.flow.backward(z)
        return xs, log_det

    def sample(self, num_samples):
        z = self.prior.sample((num_samples,))
        xs, _ = self.flow.backward(z)
        return xs


def make_flows(kind):
    if kind == "RealNVP":
        flows = [AffineHalfFlow(dim=2, parity=i%2, nh=8) for i in range(3)]
    elif kind == "NICE":
        flows = [AffineHalfFlow(dim=2, parity=i%2, nh=8, scale=False) for i in range(4)]
        flows.append(AffineConstantFlow(dim=2, shift=False))
    elif kind == "SlowMAF":
        flows = [SlowMAF(dim=2, parity=i%2, nh=8) for i in range(3)]
    elif kind == "MAF":
        flows = [MAF(dim=2, parity=i%2, nh=8) for i in range(3)]
    elif kind == "IAF":
        flows = [IAF(dim=2, parity=i%2, nh=8) for i in range(3)]
    elif kind == "ActNorm+RealNVP":
        flows = [AffineHalfFlow(dim=2, parity=i%2, nh=8) for i in range(3)]
        norms = [ActNorm(dim=2) for _ in flows]
        flows = list(itertools.chain(*zip(norms, flows)))
    elif kind == "Glow":
        flows = [Invertible1x1Conv(dim=2) for i in range(2)]
        norms = [ActNorm(dim=2) for _ in flows]
        couplings = [AffineHalfFlow(dim=2, parity=i%2, nh=8) for i in range(len(flows))]
        flows = list(itertools.chain(*zip(norms, flows, couplings))) # append a coupling layer after act norm
    return flows


def build(kind, logistic):
    if logistic:
        prior = TransformedDistribution(Uniform(torch.zeros(2), torch.ones(2)), SigmoidTransform().inv) # Logistic distribution
    else:
        prior = MultivariateNormal(torch.zeros(2), torch.eye(2))
    return NormalizingFlowModel(prior, make_flows(kind))


def train(model, batches, latents):
    records = []
    optimizer = optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-5) # todo tune WD
    print("number of params: ", sum(p.numel() for p in model.parameters()))

    model.train()
    for k in range(len(batches)):
        x = batches[k]

        zs, prior_logprob, log_det = model(x)
        logprob = prior_logprob + log_det
        loss = -torch.sum(logprob) # NLL

        model.zero_grad()
        loss.backward()
        optimizer.step()

        records.append(loss.item())
    model.eval()
    xs, log_det = model.backward(latents)
    records.append(xs[-1].detach().numpy().copy())
    records.append(log_det.detach().numpy().copy())
    records.append({n: v.detach().numpy().copy() for n, v in model.state_dict().items()})
    return records
'''

FLOWS_STEP = [
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
]

KINDS = ["RealNVP", "NICE", "SlowMAF", "MAF", "IAF", "ActNorm+RealNVP", "Glow"]


@pytest.mark.parametrize("kind", KINDS)
def test_karpathy_normalizing_flows_match_torch(capsys, kind):
    theirs, ours = both(FLOWS_SOURCE, FLOWS_STEP)
    rng = np.random.default_rng(KINDS.index(kind))
    moons = [np.stack([np.cos(a), np.sin(a) - 0.5 * (a > np.pi)], 1) + 0.05 * rng.standard_normal((16, 2)) for a in rng.uniform(0, 2 * np.pi, (4, 16))]  # fmt: skip
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
from torch.autograd import Function


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


class Sparsemax(Function):
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


class Entmax15(Function):
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


class SparseAttention(nn.Module):
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
    for x, y in zip(xs, ys):
        logits, weights = model(x)
        loss = F.cross_entropy(logits, y)
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
        model = names["SparseAttention"](6, mapping).double()
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
