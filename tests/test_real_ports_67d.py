"""Real ports, round 67 (the harness: ``tests/real_ports.py``): hyperbolic embeddings, a
program written here in the style of facebookresearch/poincare-embeddings (a small taxonomy's
transitive closure embedded in the Poincare ball by Riemannian SGD, with negative sampling,
a burn-in phase and reconstruction metrics), in float64 as that project trains, against
torch's run of the same program from the same weights and draws.

- the distance as a custom ``torch.autograd.Function`` (``ctx.save_for_backward`` of four
  tensors, ``ctx.eps`` kept on the context, ``ctx.saved_tensors``, a hand-written gradient
  with ``torch.clamp(..., min=eps)``, ``unsqueeze(-1).expand_as``, ``None`` for ``v``'s
  gradient where ``ctx.needs_input_grad[1]`` is false), checked by
  ``torch.autograd.gradcheck`` on float64 inputs and against ``torch.acosh`` differentiated by
  autograd;
- the manifold: ``normalize`` by ``p.view(-1, dim).renorm_(2, 0, maxnorm)`` in place on
  ``p.data``, the Riemannian gradient ``d_p.mul_(((1 - sqnorm) ** 2 / 4).expand_as(d_p))``,
  the retraction ``p.add_(d_p)``;
- the model: ``nn.Embedding(..., max_norm=None, scale_grad_by_freq=False)`` whose weight is
  set by ``.data.uniform_(-1e-4, 1e-4)``, then ``.double()``; ``e.narrow(1, 1, e.size(1) -
  1)`` and ``e.narrow(1, 0, 1).expand_as(o)``; the energy ``-dists`` scored by
  ``F.cross_entropy`` against ``torch.zeros(n).long()`` targets;
- the optimizer: a ``torch.optim.Optimizer`` subclass holding callables in its ``defaults``,
  ``step(lr=None)`` over ``self.param_groups`` reading ``p.grad.data``; the data: the closure
  of a taxonomy, negatives drawn by ``np.random.randint`` with rejection and, during burn-in,
  by ``np.random.choice(..., p=unigram ** 0.75)``, batches from ``np.random.permutation``
  stacked by ``torch.from_numpy``;
- evaluation under ``torch.no_grad()``: distances of every object to all (``lt[u][None]``
  broadcast), ``dists[u] = 1e12``, ranks by a broadcast comparison against the neighbours'
  distances after ``masked[neighbours] = float("inf")``, average precision by
  ``torch.argsort``, ``cumsum`` and ``torch.arange(1, n + 1, dtype=torch.float64)``; a
  checkpoint dict (``state_dict``, epoch, object names) saved by ``torch.save`` to a buffer and
  loaded by ``torch.load(..., weights_only=False)``.

The lines changed for the port: the ``import`` lines and the gradient lines (the optimizer's
``step`` takes the gradients, ``p.grad(grads)``).
"""

from __future__ import annotations

from real_ports import (
    assert_records_agree,
    initializer,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

POINCARE_SOURCE = """
import io

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Function
from torch.optim.optimizer import Optimizer

EPS = 1e-5
BOUNDARY = 1 - EPS


class PoincareDistance(Function):
    # arcosh(1 + 2 |u - v|^2 / ((1 - |u|^2) (1 - |v|^2))), differentiated by hand
    @staticmethod
    def forward(ctx, u, v, eps=EPS):
        squnorm = torch.clamp(torch.sum(u * u, dim=-1), 0, BOUNDARY)
        sqvnorm = torch.clamp(torch.sum(v * v, dim=-1), 0, BOUNDARY)
        sqdist = torch.sum(torch.pow(u - v, 2), dim=-1)
        ctx.eps = eps
        ctx.save_for_backward(u, v, squnorm, sqvnorm)
        gamma = 1 + 2 * sqdist / ((1 - squnorm) * (1 - sqvnorm))
        root = torch.sqrt(torch.pow(gamma, 2) - 1)
        return torch.log(gamma + root)

    @staticmethod
    def half(u, v, squnorm, sqvnorm, eps):
        # d distance / d u
        alpha = 1 - squnorm
        beta = 1 - sqvnorm
        sqdist = torch.sum((u - v) ** 2, dim=-1)
        gamma = 1 + 2 * sqdist / (alpha * beta)
        inner = (u - v) + (sqdist / alpha).unsqueeze(-1).expand_as(u) * u
        scale = 4 / (alpha * beta)
        root = torch.clamp(torch.sqrt(gamma**2 - 1), min=eps)
        return (scale / root).unsqueeze(-1).expand_as(u) * inner

    @staticmethod
    def backward(ctx, g):
        u, v, squnorm, sqvnorm = ctx.saved_tensors
        g = g.unsqueeze(-1)
        gu = PoincareDistance.half(u, v, squnorm, sqvnorm, ctx.eps)
        gv = None
        if ctx.needs_input_grad[1]:
            gv = PoincareDistance.half(v, u, sqvnorm, squnorm, ctx.eps) * g
        return g.expand_as(gu) * gu, gv, None


class PoincareManifold:
    def __init__(self, eps=EPS):
        self.eps = eps
        self.boundary = 1 - eps

    def distance(self, u, v):
        return PoincareDistance.apply(u, v, self.eps)

    def normalize(self, u):
        d = u.size(-1)
        u.view(-1, d).renorm_(2, 0, self.boundary)
        return u

    def rgrad(self, p, d_p):
        p_sqnorm = torch.sum(p * p, dim=-1, keepdim=True)
        d_p = d_p * ((1 - p_sqnorm) ** 2 / 4).expand_as(d_p)
        return d_p

    def expm(self, p, d_p, lr=None, out=None):
        if lr is not None:
            d_p.mul_(-lr)
        if out is None:
            out = p
        out.add_(d_p)
        self.normalize(out)
        return out


class RiemannianSGD(Optimizer):
    def __init__(self, params, lr, rgrad, expm):
        defaults = dict(lr=lr, rgrad=rgrad, expm=expm)
        super(RiemannianSGD, self).__init__(params, defaults)

    def step(self, lr=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                lr_now = lr if lr is not None else group["lr"]
                d_p = p.grad.data
                d_p = group["rgrad"](p.data, d_p)
                group["expm"](p.data, d_p, lr=lr_now)


class Embedding(nn.Module):
    def __init__(self, size, dim, manifold):
        super(Embedding, self).__init__()
        self.dim = dim
        self.nobjects = size
        self.manifold = manifold
        self.lt = nn.Embedding(size, dim, max_norm=None, scale_grad_by_freq=False)
        self.lt.weight.data.uniform_(-1e-4, 1e-4)
        self.manifold.normalize(self.lt.weight.data)

    def forward(self, inputs):
        e = self.lt(inputs)
        with torch.no_grad():
            e = self.manifold.normalize(e)
        o = e.narrow(1, 1, e.size(1) - 1)
        s = e.narrow(1, 0, 1).expand_as(o)
        return -self.manifold.distance(s, o)

    def loss(self, preds, targets):
        return F.cross_entropy(preds, targets)


TAXONOMY = {
    "mammal": ["carnivore", "ungulate", "primate"],
    "carnivore": ["canine", "feline"],
    "canine": ["wolf", "fox"],
    "feline": ["lion", "lynx"],
    "ungulate": ["horse", "deer", "bison"],
    "primate": ["human", "gibbon"],
}


def closure(tree):
    names = sorted({n for k, vs in tree.items() for n in [k, *vs]})
    index = {n: i for i, n in enumerate(names)}
    parent = {c: p for p, cs in tree.items() for c in cs}
    pairs = []
    for name in names:
        node = name
        while node in parent:
            node = parent[node]
            pairs.append((index[name], index[node]))
    return names, np.array(pairs, dtype=np.int64)


class Sampler:
    # each (child, ancestor) pair with `nnegs` objects not related to the child
    def __init__(self, idx, nobjects, nnegs, batch_size):
        self.idx = idx
        self.nobjects = nobjects
        self.nnegs = nnegs
        self.batch_size = batch_size
        self.related = {i: set() for i in range(nobjects)}
        for t, h in idx:
            self.related[t].add(h)
            self.related[h].add(t)
        counts = np.bincount(idx.reshape(-1), minlength=nobjects).astype(np.float64)
        self.unigram = counts**0.75 / np.sum(counts**0.75)
        self.burnin = False

    def negatives(self, t):
        negs = []
        tries = 0
        while len(negs) < self.nnegs and tries < 100:
            tries += 1
            if self.burnin:
                n = int(np.random.choice(self.nobjects, p=self.unigram))
            else:
                n = int(np.random.randint(0, self.nobjects))
            if n != t and n not in self.related[t] and n not in negs:
                negs.append(n)
        while len(negs) < self.nnegs:  # too few unrelated objects: repeat the first ones
            negs.append(negs[len(negs) % max(1, len(negs))] if negs else t)
        return negs

    def __iter__(self):
        perm = np.random.permutation(len(self.idx))
        for start in range(0, len(perm), self.batch_size):
            rows = []
            for i in perm[start : start + self.batch_size]:
                t, h = self.idx[i]
                rows.append([t, h] + self.negatives(t))
            inputs = torch.from_numpy(np.array(rows, dtype=np.int64))
            targets = torch.zeros(inputs.size(0)).long()
            yield inputs, targets


def reconstruction(lt, related, manifold):
    ranks, aps = [], []
    n = lt.size(0)
    for u in range(n):
        neighbours = sorted(related[u])
        if not neighbours:
            continue
        dists = manifold.distance(lt[u][None].expand_as(lt), lt)
        dists[u] = 1e12
        nb = torch.tensor(neighbours)
        masked = dists.clone()
        masked[nb] = float("inf")
        rank = (masked.unsqueeze(0) < dists[nb].unsqueeze(1)).sum(dim=1) + 1
        ranks.extend(rank.tolist())
        order = torch.argsort(dists)
        is_nb = torch.zeros(n, dtype=torch.bool)
        is_nb[nb] = True
        hits = is_nb[order].double()
        precision = hits.cumsum(0) / torch.arange(1, n + 1, dtype=torch.float64)
        aps.append(((precision * hits).sum() / hits.sum()).item())
    return float(np.mean(ranks)), float(np.mean(aps))


# the distance and its hand-written gradient
manifold = PoincareManifold()
a = (torch.rand(5, 3, dtype=torch.float64) - 0.5).requires_grad_(True)
b = (torch.rand(5, 3, dtype=torch.float64) - 0.5).requires_grad_(True)
record.append(torch.autograd.gradcheck(lambda x, y: PoincareDistance.apply(x, y), (a, b),
                                       eps=1e-6, atol=1e-5))
dist = manifold.distance(a, b)
direct = torch.acosh(1 + 2 * torch.sum((a - b) ** 2, dim=-1)
                     / ((1 - torch.sum(a * a, dim=-1)) * (1 - torch.sum(b * b, dim=-1))))
ga, gb = torch.autograd.grad(dist.sum(), [a, b])
da, db = torch.autograd.grad(direct.sum(), [a, b])
record.append([dist.dtype == torch.float64, (dist - direct).abs().max().item() < 1e-12,
               (ga - da).abs().max().item() < 1e-9, (gb - db).abs().max().item() < 1e-9])
record.append(ga.numpy().copy())

names, idx = closure(TAXONOMY)
model = Embedding(len(names), 2, manifold).double()
initialize(model)
optimizer = RiemannianSGD(model.parameters(), lr=0.3, rgrad=manifold.rgrad, expm=manifold.expm)
sampler = Sampler(idx, len(names), nnegs=4, batch_size=8)

burnin, epochs, lr_burnin = 2, 6, 0.1
for epoch in range(epochs):
    sampler.burnin = epoch < burnin
    lr = 0.3 * lr_burnin if epoch < burnin else 0.3
    epoch_loss = []
    for inputs, targets in sampler:
        optimizer.zero_grad()
        preds = model(inputs)
        loss = model.loss(preds, targets)
        loss.backward()
        optimizer.step(lr=lr)
        epoch_loss.append(loss.item())
    record.append(epoch_loss)
    norms = model.lt.weight.detach().norm(dim=-1)
    print("epoch {} loss {:.5f} max norm {:.4f}".format(epoch, np.mean(epoch_loss),
                                                       norms.max().item()))

record.append({"lt": model.lt.weight.detach().numpy().copy()})

buffer = io.BytesIO()
torch.save({"model": model.state_dict(), "epoch": epochs, "objects": names}, buffer)
buffer.seek(0)
checkpoint = torch.load(buffer, weights_only=False)
restored = Embedding(len(checkpoint["objects"]), 2, manifold).double()
restored.load_state_dict(checkpoint["model"])
with torch.no_grad():
    lt = restored.lt.weight
    mean_rank, map_rank = reconstruction(lt, sampler.related, manifold)
    record.append([checkpoint["epoch"], mean_rank, map_rank])
    root = names.index("mammal")
    record.append(lt.norm(dim=-1)[root].item() < lt.norm(dim=-1).mean().item())
"""

POINCARE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    ("    def step(self, lr=None):\n", "    def step(self, grads, lr=None):\n"),
    ("                if p.grad is None:\n", "                if p.grad(grads) is None:\n"),
    ("                d_p = p.grad.data\n", "                d_p = p.grad(grads).data\n"),
    (
        "        loss.backward()\n        optimizer.step(lr=lr)\n",
        "        grads = loss.backward()\n        optimizer.step(grads, lr=lr)\n",
    ),
]


def test_poincare_embeddings_train_by_riemannian_sgd_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        POINCARE_SOURCE, POINCARE_STEPS, capsys, 6703, initialize=initializer()
    )
    assert len(theirs) == 3 + 6 + 1 + 2
    assert theirs[0] is True and theirs[1] == [True] * 4
    assert their_log.count("\n") == 6 and len(our_log.splitlines()) == 6
    assert_records_agree(ours, theirs, rtol=1e-7, atol=1e-9)
