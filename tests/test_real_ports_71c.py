"""Real ports, round 71 (the harness: ``tests/real_ports.py``): neural topic models, a program
written here in the style of the ProdLDA/AVITM reimplementations (hyqneuron/pytorch-avitm:
autoencoding variational inference for topic models, a Laplace approximation of a Dirichlet
prior in the softmax basis, a product-of-experts decoder), trained on bag-of-words counts
drawn from known topics, run under torch and, ported, under retrograd from the same weights
and draws, in float32 and in float64 (``model.double()``), every record compared.

It reaches:

- the data: NumPy-drawn counts (a ``Generator``'s ``multinomial`` of ``dirichlet`` mixtures),
  ``torch.from_numpy(...).float()`` or ``.double()``, a ``TensorDataset`` and a
  ``DataLoader(batch_size=..., shuffle=False, drop_last=True)``;
- the prior: ``torch.from_numpy`` of the Laplace mean and variance (NumPy float32), ``.log()``,
  registered by ``register_buffer``;
- the model: ``F.softplus`` encoders, ``nn.Linear(..., bias=False)`` before each
  ``nn.BatchNorm1d`` whose weight is frozen by
  ``.weight.data.copy_(torch.ones(...))`` and ``.weight.requires_grad = False`` (so the
  optimizer takes ``filter(lambda p: p.requires_grad, ...)``), the reparameterized draw
  ``input.data.new().resize_as_(mean.data).normal_()`` (a shared fill), ``posterior_var.sqrt()``,
  ``F.softmax(..., dim=1)`` of the topic draw, the decoder's weight filled by
  ``.data.uniform_(0, init_mult)`` (a shared fill), ``nn.Dropout`` at ``p=0``;
- the loss: the reconstruction ``-(input * (recon + 1e-10).log()).sum(1)``, the Gaussian KL
  to the prior by ``expand_as`` and ``.sum(1)``, ``- num_topic``, and ``loss.mean()``;
- training: ``Adam(betas=(0.99, 0.999))``, ``ExponentialLR``, ``zero_grad()``;
- evaluation under ``torch.no_grad()``: perplexity by ``torch.exp`` of summed losses over
  ``bow.sum()``, the topics' top words by ``torch.topk`` of ``decoder.weight.data.t()``,
  a document-frequency NPMI coherence by ``(bow > 0).to(dtype)`` ``@`` its transpose,
  ``torch.log`` and ``torch.triu_indices``; topic proportions by ``model.eval()`` (BatchNorm's
  running statistics); ``state_dict`` through ``torch.save``/``torch.load`` and a restored
  model's reconstruction, ``num_batches_tracked`` compared.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import pytest

from real_ports import (
    SharedFills,
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

PRODLDA_SOURCE = """import io

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Args:
    num_input = 20
    en1_units = 12
    en2_units = 12
    num_topic = 3
    init_mult = 1.0
    variance = 0.995
    batch_size = 8
    learning_rate = 0.02
    momentum = 0.99


def laplace_prior(num_topic, alpha=1.0):
    a = alpha * np.ones((1, num_topic)).astype(np.float32)
    mean = (np.log(a).T - np.mean(np.log(a), 1)).T
    var = (((1.0 / a) * (1 - (2.0 / num_topic))).T
           + (1.0 / (num_topic * num_topic)) * np.sum(1.0 / a, 1)).T
    return torch.from_numpy(mean), torch.from_numpy(var)


class ProdLDA(nn.Module):
    def __init__(self, net_arch):
        super(ProdLDA, self).__init__()
        ac = net_arch
        self.net_arch = net_arch
        self.en1_fc = nn.Linear(ac.num_input, ac.en1_units)
        self.en2_fc = nn.Linear(ac.en1_units, ac.en2_units)
        self.en2_drop = nn.Dropout(0.0)
        self.mean_fc = nn.Linear(ac.en2_units, ac.num_topic, bias=False)
        self.mean_bn = nn.BatchNorm1d(ac.num_topic)
        self.logvar_fc = nn.Linear(ac.en2_units, ac.num_topic, bias=False)
        self.logvar_bn = nn.BatchNorm1d(ac.num_topic)
        self.p_drop = nn.Dropout(0.0)
        self.decoder = nn.Linear(ac.num_topic, ac.num_input, bias=False)
        self.decoder_bn = nn.BatchNorm1d(ac.num_input)
        prior_mean, prior_var = laplace_prior(ac.num_topic)
        self.register_buffer("prior_mean", prior_mean)
        self.register_buffer("prior_var", prior_var)
        self.register_buffer("prior_logvar", prior_var.log())
        for bn in (self.mean_bn, self.logvar_bn, self.decoder_bn):
            bn.weight.data.copy_(torch.ones(bn.weight.shape))
            bn.weight.requires_grad = False

    def init_decoder(self):
        if self.net_arch.init_mult != 0:
            self.decoder.weight.data.uniform_(0, self.net_arch.init_mult)

    def forward(self, input, compute_loss=False, avg_loss=True):
        en1 = F.softplus(self.en1_fc(input))
        en2 = F.softplus(self.en2_fc(en1))
        en2 = self.en2_drop(en2)
        posterior_mean = self.mean_bn(self.mean_fc(en2))
        posterior_logvar = self.logvar_bn(self.logvar_fc(en2))
        posterior_var = posterior_logvar.exp()
        eps = input.data.new().resize_as_(posterior_mean.data).normal_()
        z = posterior_mean + posterior_var.sqrt() * eps
        p = F.softmax(z, dim=1)
        p = self.p_drop(p)
        recon = F.softmax(self.decoder_bn(self.decoder(p)), dim=1)
        if compute_loss:
            return recon, self.loss(input, recon, posterior_mean, posterior_logvar,
                                    posterior_var, avg_loss)
        return recon

    def loss(self, input, recon, posterior_mean, posterior_logvar, posterior_var, avg=True):
        NL = -(input * (recon + 1e-10).log()).sum(1)
        prior_mean = self.prior_mean.expand_as(posterior_mean)
        prior_var = self.prior_var.expand_as(posterior_mean)
        prior_logvar = self.prior_logvar.expand_as(posterior_mean)
        var_division = posterior_var / prior_var
        diff = posterior_mean - prior_mean
        diff_term = diff * diff / prior_var
        logvar_division = prior_logvar - posterior_logvar
        KLD = 0.5 * ((var_division + diff_term + logvar_division).sum(1) - self.net_arch.num_topic)
        loss = NL + KLD
        if avg:
            return loss.mean()
        return loss

    def proportions(self, input):
        en2 = F.softplus(self.en2_fc(F.softplus(self.en1_fc(input))))
        return F.softmax(self.mean_bn(self.mean_fc(en2)), dim=1)


def make_corpus(n_docs, args, rng):
    topics = np.zeros((args.num_topic, args.num_input))
    for k in range(args.num_topic):
        topics[k, k * 6:(k + 1) * 6 + 2] = 1.0
    topics = (topics + 0.05) / (topics + 0.05).sum(1, keepdims=True)
    theta = rng.dirichlet(0.3 * np.ones(args.num_topic), size=n_docs)
    lengths = rng.integers(15, 30, size=n_docs)
    return np.stack([rng.multinomial(n, t @ topics) for n, t in zip(lengths, theta)])


def npmi_coherence(top_words, doc_word):
    present = (doc_word > 0).to(doc_word.dtype)
    n_docs = present.shape[0]
    joint = present.t() @ present / n_docs
    marginal = present.mean(0)
    scores = []
    for words in top_words:
        pairs = torch.triu_indices(len(words), len(words), offset=1)
        i, j = words[pairs[0]], words[pairs[1]]
        p_ij = joint[i, j] + 1e-12
        pmi = torch.log(p_ij / (marginal[i] * marginal[j]))
        scores.append((pmi / -torch.log(p_ij)).mean())
    return torch.stack(scores)


args = Args()
rng = np.random.default_rng(71)
counts = make_corpus(32, args, rng)
to_dtype = (lambda t: t.double()) if DTYPE == "float64" else (lambda t: t.float())
tensor_tr = to_dtype(torch.from_numpy(counts))
loader = DataLoader(TensorDataset(tensor_tr), batch_size=args.batch_size, shuffle=False,
                    drop_last=True)

model = ProdLDA(args)
model.init_decoder()
initialize(model)
model = model.double() if DTYPE == "float64" else model
trainable = filter(lambda p: p.requires_grad, model.parameters())
optimizer = torch.optim.Adam(trainable, args.learning_rate, betas=(args.momentum, 0.999))
scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)

for epoch in range(3):
    loss_epoch = 0.0
    model.train()
    for (input,) in loader:
        recon, loss = model(input, compute_loss=True)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss_epoch += loss.item()
        record.append(loss.item())
    scheduler.step()
    record.append(params_of(model))
    record.append({"mean_bn.running_mean": model.mean_bn.running_mean.numpy().copy(),
                   "decoder_bn.running_var": model.decoder_bn.running_var.numpy().copy()})
    print("Epoch {}, loss={:.4f}".format(epoch, loss_epoch / len(loader)))

model.eval()
with torch.no_grad():
    _, doc_losses = model(tensor_tr, compute_loss=True, avg_loss=False)
    perplexity = torch.exp(doc_losses.sum() / tensor_tr.sum())
    record.append([perplexity.item(), doc_losses.dtype == tensor_tr.dtype])
    beta = model.decoder.weight.data.t()
    values, top_words = torch.topk(beta, 5, dim=1)
    record.append(values.numpy().copy())
    record.append(top_words.tolist())
    record.append(npmi_coherence(top_words, tensor_tr).numpy().copy())
    theta = model.proportions(tensor_tr[:6])
    record.append(theta.numpy().copy())
    record.append(theta.argmax(dim=1).tolist())

buffer = io.BytesIO()
torch.save(model.state_dict(), buffer)
buffer.seek(0)
state = torch.load(buffer)
restored = ProdLDA(args)
restored = restored.double() if DTYPE == "float64" else restored
restored.load_state_dict(state)
restored.eval()
record.append(int(state["mean_bn.num_batches_tracked"]))
record.append(sorted(state.keys())[:5])
with torch.no_grad():
    recon = restored(tensor_tr[:4])
    record.append(recon.numpy().copy())
"""

PRODLDA_STEPS = [
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


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_prodlda_topic_model_as_torch(capsys, dtype):
    import torch

    import retrograd as rg

    with SharedFills(torch, 7103), SharedFills(rg, 7103):
        (theirs, ours), (their_log, our_log) = runs_with_draws(
            PRODLDA_SOURCE,
            PRODLDA_STEPS,
            capsys,
            7102,
            initialize=initializer(),
            params_of=params_of,
            DTYPE=dtype,
        )
    assert len(theirs) == 3 * (4 + 2) + 9
    assert their_log == our_log and their_log.count("\n") == 3
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
