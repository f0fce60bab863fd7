"""Real ports, round 80 (the harness: ``tests/real_ports.py``): variational autoencoders for
collaborative filtering, a program written here in the style of dawenl/vae_cf as its PyTorch
ports write it (younggyoseo/vae-cf-pytorch: ``models.py``, ``metric.py``, ``main.py``), a
Mult-VAE with KL annealing and a Mult-DAE, trained on implicit feedback held in a SciPy CSR
matrix and evaluated by fold-in NDCG@k and Recall@k; each run under torch and, ported, under
retrograd from the same weights and draws, every record compared.

It reaches:

- the data: a ground-truth preference ``torch.sigmoid`` of ``torch.randn`` factors, clicks
  ``torch.rand(...) < p`` turned into ``(rows, cols)`` by ``nonzero(as_tuple=True)`` and
  ``.numpy()``, a ``scipy.sparse.csr_matrix`` of them, the fold-in split of validation users
  by ``np.random.choice(..., replace=False)``, batches ``torch.FloatTensor(data[idx].toarray())``
  over an ``np.random.shuffle``-d index list;
- the models: the encoder and decoder dims ``q_dims``/``p_dims`` with ``nn.ModuleList`` of
  ``nn.Linear`` built from ``zip(dims[:-1], dims[1:])``, initialised by
  ``nn.init.xavier_uniform_`` and ``layer.bias.data.normal_(0.0, 0.001)`` (then overwritten by
  torch's weights), ``F.normalize`` of the input, ``nn.Dropout`` (its masks from one seeded
  stream for both libraries), ``torch.tanh`` layers, the last encoder layer split
  ``h[:, :latent]``/``h[:, latent:]``, the reparameterisation ``torch.exp(0.5 * logvar)``,
  ``torch.randn_like`` and ``eps.mul(std).add_(mu)`` in training, ``mu`` in evaluation;
- the losses: the multinomial log-likelihood ``-torch.mean(torch.sum(F.log_softmax(recon, 1)
  * x, -1))``, the KL ``-0.5 * torch.mean(torch.sum(1 + logvar - mu.pow(2) - logvar.exp(),
  dim=1))`` weighted by ``min(anneal_cap, update_count / total_anneal_steps)``, the DAE's L2
  penalty summed over the weights ``p.norm(2) ** 2`` of ``named_parameters`` ending in
  ``"weight"``;
- training: ``Adam(..., weight_decay=0.0)``; evaluation under ``torch.no_grad()`` with
  ``model.eval()``: seen items masked by ``recon[data_tensor > 0] = -float("inf")``, NDCG@k by
  ``torch.topk(..., sorted=True)``, a discount ``1.0 / torch.log2(torch.arange(2, k + 2)
  .float())``, ``torch.gather`` of the held-out clicks, the ideal DCG by
  ``torch.cumsum(discount, 0)`` indexed by ``clamp(max=k) - 1``; Recall@k by a boolean top-k
  mask ``torch.zeros_like(..., dtype=torch.bool).scatter_(1, idx, True)`` and ``&`` with the
  held-out mask over ``torch.minimum(torch.full_like(...), ...)``; the best checkpoint kept by
  ``torch.save`` of ``{"epoch", "state_dict"}`` to a buffer when NDCG improves, reloaded by
  ``torch.load`` into a fresh model by ``load_state_dict``.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

VAE_CF_SOURCE = """import io

import numpy as np
import scipy.sparse as sparse
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

N_USERS, N_VAL, N_ITEMS = 40, 10, 24


# -- the data (vae_cf's preprocessing, in miniature) ---------------------------------------------
user_factors = torch.randn(N_USERS + N_VAL, 3)
item_factors = torch.randn(N_ITEMS, 3)
prefer = torch.sigmoid(user_factors @ item_factors.T * 1.5 - 1.0)
clicks = torch.rand(N_USERS + N_VAL, N_ITEMS) < prefer
rows, cols = clicks.nonzero(as_tuple=True)
rows, cols = rows.numpy(), cols.numpy()
matrix = sparse.csr_matrix((np.ones_like(rows), (rows, cols)), dtype="float64",
                           shape=(N_USERS + N_VAL, N_ITEMS))
train_data = matrix[:N_USERS]
vad_tr, vad_te = matrix[N_USERS:].tolil(copy=True), sparse.lil_matrix((N_VAL, N_ITEMS))
for u in range(N_VAL):
    items = matrix[N_USERS + u].indices
    if len(items) >= 3:
        held = np.random.choice(len(items), size=max(1, int(0.3 * len(items))), replace=False)
        for i in items[held]:
            vad_tr[u, i] = 0.0
            vad_te[u, i] = 1.0
vad_data_tr, vad_data_te = vad_tr.tocsr(), vad_te.tocsr()
vad_data_tr.eliminate_zeros()


def naive_sparse2tensor(data):
    return torch.FloatTensor(data.toarray())


# -- models.py -----------------------------------------------------------------------------------
class MultiDAE(nn.Module):
    def __init__(self, p_dims, q_dims=None, dropout=0.5):
        super().__init__()
        self.p_dims = p_dims
        self.q_dims = q_dims if q_dims else p_dims[::-1]
        self.dims = self.q_dims + self.p_dims[1:]
        self.layers = nn.ModuleList([nn.Linear(d_in, d_out) for d_in, d_out in
                                     zip(self.dims[:-1], self.dims[1:])])
        self.drop = nn.Dropout(dropout)
        self.init_weights()

    def forward(self, input):
        h = F.normalize(input)
        h = self.drop(h)
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if i != len(self.layers) - 1:
                h = torch.tanh(h)
        return h

    def init_weights(self):
        for layer in self.layers:
            nn.init.xavier_uniform_(layer.weight)
            layer.bias.data.normal_(0.0, 0.001)


class MultiVAE(nn.Module):
    def __init__(self, p_dims, q_dims=None, dropout=0.5):
        super().__init__()
        self.p_dims = p_dims
        self.q_dims = q_dims if q_dims else p_dims[::-1]
        # the last encoder layer gives the mean and the log-variance
        temp_q_dims = self.q_dims[:-1] + [self.q_dims[-1] * 2]
        self.q_layers = nn.ModuleList([nn.Linear(d_in, d_out) for d_in, d_out in
                                       zip(temp_q_dims[:-1], temp_q_dims[1:])])
        self.p_layers = nn.ModuleList([nn.Linear(d_in, d_out) for d_in, d_out in
                                       zip(self.p_dims[:-1], self.p_dims[1:])])
        self.drop = nn.Dropout(dropout)
        self.init_weights()

    def forward(self, input):
        mu, logvar = self.encode(input)
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar

    def encode(self, input):
        h = F.normalize(input)
        h = self.drop(h)
        for i, layer in enumerate(self.q_layers):
            h = layer(h)
            if i != len(self.q_layers) - 1:
                h = torch.tanh(h)
            else:
                mu = h[:, :self.q_dims[-1]]
                logvar = h[:, self.q_dims[-1]:]
        return mu, logvar

    def reparameterize(self, mu, logvar):
        if self.training:
            std = torch.exp(0.5 * logvar)
            eps = torch.randn_like(std)
            return eps.mul(std).add_(mu)
        return mu

    def decode(self, z):
        h = z
        for i, layer in enumerate(self.p_layers):
            h = layer(h)
            if i != len(self.p_layers) - 1:
                h = torch.tanh(h)
        return h

    def init_weights(self):
        for layer in list(self.q_layers) + list(self.p_layers):
            nn.init.xavier_uniform_(layer.weight)
            layer.bias.data.normal_(0.0, 0.001)


def loss_function_vae(recon_x, x, mu, logvar, anneal=1.0):
    BCE = -torch.mean(torch.sum(F.log_softmax(recon_x, 1) * x, -1))
    KLD = -0.5 * torch.mean(torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=1))
    return BCE + anneal * KLD


def loss_function_dae(recon_x, x, model, lam):
    BCE = -torch.mean(torch.sum(F.log_softmax(recon_x, 1) * x, -1))
    l2 = sum(p.norm(2) ** 2 for name, p in model.named_parameters() if name.endswith("weight"))
    return BCE + lam * l2 / 2


# -- metric.py -----------------------------------------------------------------------------------
def NDCG_binary_at_k_batch(X_pred, heldout_batch, k=5):
    batch_users = X_pred.shape[0]
    idx_topk = torch.topk(X_pred, k, dim=1, sorted=True).indices
    tp = 1.0 / torch.log2(torch.arange(2, k + 2).float())
    DCG = (torch.gather(heldout_batch, 1, idx_topk) * tp).sum(dim=1)
    n_heldout = heldout_batch.sum(dim=1).long()
    IDCG = torch.cumsum(tp, 0)[n_heldout.clamp(min=1, max=k) - 1]
    return (DCG / IDCG)[n_heldout > 0]


def Recall_at_k_batch(X_pred, heldout_batch, k=5):
    idx = torch.topk(X_pred, k, dim=1).indices
    X_pred_binary = torch.zeros_like(X_pred, dtype=torch.bool).scatter_(1, idx, True)
    X_true_binary = heldout_batch > 0
    hits = (X_pred_binary & X_true_binary).sum(dim=1).float()
    n_true = X_true_binary.sum(dim=1).float()
    recall = hits / torch.minimum(torch.full_like(n_true, k), n_true).clamp(min=1)
    return recall[n_true > 0]


# -- main.py -------------------------------------------------------------------------------------
p_dims = [4, 12, N_ITEMS]
model = MultiVAE(p_dims, dropout=0.5) if MODEL == "vae" else MultiDAE(p_dims, dropout=0.5)
initialize(model)
optimizer = optim.Adam(model.parameters(), lr=1e-2, weight_decay=0.0)
total_anneal_steps, anneal_cap, batch_size = 6, 0.2, 16
update_count = 0
idxlist = list(range(N_USERS))


def train():
    global update_count
    model.train()
    np.random.shuffle(idxlist)
    for start_idx in range(0, N_USERS, batch_size):
        end_idx = min(start_idx + batch_size, N_USERS)
        data = naive_sparse2tensor(train_data[idxlist[start_idx:end_idx]])
        if total_anneal_steps > 0:
            anneal = min(anneal_cap, 1.0 * update_count / total_anneal_steps)
        else:
            anneal = anneal_cap
        optimizer.zero_grad()
        if MODEL == "vae":
            recon_batch, mu, logvar = model(data)
            loss = loss_function_vae(recon_batch, data, mu, logvar, anneal)
        else:
            recon_batch = model(data)
            loss = loss_function_dae(recon_batch, data, model, lam=1e-3)
        loss.backward()
        optimizer.step()
        update_count += 1
        record.append([loss.item(), anneal])


def evaluate(data_tr, data_te):
    model.eval()
    with torch.no_grad():
        data_tensor = naive_sparse2tensor(data_tr)
        heldout = naive_sparse2tensor(data_te)
        if MODEL == "vae":
            recon_batch, mu, logvar = model(data_tensor)
            loss = loss_function_vae(recon_batch, data_tensor, mu, logvar, anneal_cap)
        else:
            recon_batch = model(data_tensor)
            loss = loss_function_dae(recon_batch, data_tensor, model, lam=1e-3)
        recon_batch[data_tensor > 0] = -float("inf")
        n5 = NDCG_binary_at_k_batch(recon_batch, heldout, 5)
        r5 = Recall_at_k_batch(recon_batch, heldout, 5)
    return loss.item(), n5.mean().item(), r5.mean().item(), n5.numpy().copy()


best_n5, best_buffer = -np.inf, None
for epoch in range(1, 4):
    train()
    val_loss, n5, r5, per_user = evaluate(vad_data_tr, vad_data_te)
    record.append([val_loss, n5, r5])
    record.append(per_user)
    record.append(params_of(model))
    print(f"| end of epoch {epoch:3d} | valid loss {val_loss:4.2f} | n5 {n5:4.3f} | r5 {r5:4.3f}")
    if n5 > best_n5:
        best_buffer = io.BytesIO()
        torch.save({"epoch": epoch, "state_dict": model.state_dict()}, best_buffer)
        best_n5 = n5

best_buffer.seek(0)
checkpoint = torch.load(best_buffer)
model = MultiVAE(p_dims) if MODEL == "vae" else MultiDAE(p_dims)
model.load_state_dict(checkpoint["state_dict"])
record.append([checkpoint["epoch"]])
record.append(list(evaluate(vad_data_tr, vad_data_te)[:3]))
"""

VAE_CF_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def shared_dropout(monkeypatch, lib, seed):
    """``nn.Dropout`` in training mode drawing its keep-masks from one seeded stream."""
    rng = np.random.default_rng(seed)
    original = lib.nn.Dropout.forward

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return original(self, x)
        keep = rng.uniform(size=tuple(x.shape)) >= self.p
        return x * lib.tensor(keep / (1.0 - self.p), dtype=x.dtype)

    monkeypatch.setattr(lib.nn.Dropout, "forward", forward)


@pytest.mark.parametrize("model", ["vae", "dae"])
def test_mult_vae_and_dae_collaborative_filtering_as_torch(capsys, monkeypatch, model):
    with monkeypatch.context() as patch:
        for lib in (torch, rg):
            shared_dropout(patch, lib, 8003)
        (theirs, ours), (their_log, our_log) = runs_with_draws(
            VAE_CF_SOURCE,
            VAE_CF_STEPS,
            capsys,
            8003,
            initialize=initializer(),
            params_of=params_of,
            MODEL=model,
        )
    assert len(theirs) == 3 * (3 + 3) + 2
    assert their_log == our_log and their_log.count("\n") == 3
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
