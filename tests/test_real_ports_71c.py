"""Real ports, round 71 (the harness: ``tests/real_ports.py``): neural topic models, two
programs written here. The first in the style of the ProdLDA/AVITM reimplementations
(hyqneuron/pytorch-avitm: autoencoding variational inference for topic models, a Laplace
approximation of a Dirichlet prior in the softmax basis, a product-of-experts decoder),
trained on bag-of-words counts drawn from known topics, run under torch and, ported, under
retrograd from the same weights and draws, in float32 and in float64 (``model.double()``),
every record compared.

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

The second in the style of adjidieng/ETM (the embedded topic model: topics as softmaxes over
the inner products of word embeddings and topic embeddings), with trained embeddings and with
frozen pretrained ones, reaching: ``nn.Embedding.from_pretrained(freeze=True)`` beside a
bias-free ``nn.Linear`` as the word embeddings, an activation picked from a dict of modules,
the reparameterization ``eps.mul_(std).add_(mu)`` of ``torch.randn_like``, the KL ``-0.5 *
torch.sum(1 + logsigma - mu.pow(2) - logsigma.exp(), dim=-1).mean()``, ``F.softmax(logit,
dim=0).transpose(1, 0)``, ``torch.mm``, batches by ``torch.split(torch.arange(n), 8)`` and
index tensors, ``sum(1).unsqueeze(1)`` normalization, ``clip_grad_norm_``, ``Adam`` with
``weight_decay``; document-completion perplexity under ``torch.no_grad()`` from
``torch.floor`` halves, the best ``copy.deepcopy(model.state_dict())`` restored, top words by
NumPy ``argsort()[-4:][::-1]`` of ``beta[k].cpu().numpy()``, the loss at a fixed ``theta`` of
``torch.full``, ``aggregate=False`` per-document losses, and the trainable names.

The lines changed for the ports: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``clip_grad_norm_(grads, ...)``, ``optimizer.step(grads)``).
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


ETM_SOURCE = """import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class ETM(nn.Module):
    def __init__(self, num_topics, vocab_size, t_hidden_size, rho_size, emsize, theta_act,
                 embeddings=None, train_embeddings=True, enc_drop=0.0):
        super(ETM, self).__init__()
        self.num_topics = num_topics
        self.vocab_size = vocab_size
        self.enc_drop = enc_drop
        self.t_drop = nn.Dropout(enc_drop)
        self.theta_act = self.get_activation(theta_act)
        if train_embeddings:
            self.rho = nn.Linear(rho_size, vocab_size, bias=False)
        else:
            num_embeddings, emsize = embeddings.size()
            self.rho = nn.Embedding.from_pretrained(embeddings, freeze=True)
        self.alphas = nn.Linear(rho_size, num_topics, bias=False)
        self.q_theta = nn.Sequential(
            nn.Linear(vocab_size, t_hidden_size), self.theta_act,
            nn.Linear(t_hidden_size, t_hidden_size), self.theta_act,
        )
        self.mu_q_theta = nn.Linear(t_hidden_size, num_topics, bias=True)
        self.logsigma_q_theta = nn.Linear(t_hidden_size, num_topics, bias=True)
        self.train_embeddings = train_embeddings

    def get_activation(self, act):
        activations = {"tanh": nn.Tanh(), "relu": nn.ReLU(), "softplus": nn.Softplus(),
                       "rrelu": nn.RReLU(), "leakyrelu": nn.LeakyReLU(), "elu": nn.ELU(),
                       "selu": nn.SELU(), "glu": nn.GLU()}
        return activations.get(act, nn.Tanh())

    def reparameterize(self, mu, logvar):
        if self.training:
            std = torch.exp(0.5 * logvar)
            eps = torch.randn_like(std)
            return eps.mul_(std).add_(mu)
        return mu

    def encode(self, bows):
        q_theta = self.q_theta(bows)
        if self.enc_drop > 0:
            q_theta = self.t_drop(q_theta)
        mu_theta = self.mu_q_theta(q_theta)
        logsigma_theta = self.logsigma_q_theta(q_theta)
        kl_theta = -0.5 * torch.sum(1 + logsigma_theta - mu_theta.pow(2) - logsigma_theta.exp(),
                                    dim=-1).mean()
        return mu_theta, logsigma_theta, kl_theta

    def get_beta(self):
        logit = self.alphas(self.rho.weight)  # (vocab_size, num_topics) either way
        beta = F.softmax(logit, dim=0).transpose(1, 0)
        return beta

    def get_theta(self, normalized_bows):
        mu_theta, logsigma_theta, kld_theta = self.encode(normalized_bows)
        z = self.reparameterize(mu_theta, logsigma_theta)
        theta = F.softmax(z, dim=-1)
        return theta, kld_theta

    def decode(self, theta, beta):
        res = torch.mm(theta, beta)
        preds = torch.log(res + 1e-6)
        return preds

    def forward(self, bows, normalized_bows, theta=None, aggregate=True):
        if theta is None:
            theta, kld_theta = self.get_theta(normalized_bows)
        else:
            kld_theta = None
        beta = self.get_beta()
        preds = self.decode(theta, beta)
        recon_loss = -(preds * bows).sum(1)
        if aggregate:
            recon_loss = recon_loss.mean()
        return recon_loss, kld_theta


def make_corpus(n_docs, vocab_size, num_topics, rng):
    topics = rng.dirichlet(0.2 * np.ones(vocab_size), size=num_topics)
    theta = rng.dirichlet(0.5 * np.ones(num_topics), size=n_docs)
    return np.stack([rng.multinomial(rng.integers(10, 25), t @ topics) for t in theta])


rng = np.random.default_rng(17)
vocab_size, num_topics, rho_size = 16, 3, 6
counts = make_corpus(24, vocab_size, num_topics, rng)
train_tokens = torch.from_numpy(counts).float()
embeddings = torch.from_numpy(rng.standard_normal((vocab_size, rho_size)).astype(np.float32))
model = ETM(num_topics, vocab_size, 10, rho_size, rho_size, THETA_ACT, embeddings=embeddings,
            train_embeddings=TRAIN_EMBEDDINGS)
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=0.02, weight_decay=1.2e-6)
clip = 0.5

best_val = math.inf
for epoch in range(3):
    model.train()
    indices = torch.split(torch.arange(train_tokens.shape[0]), 8)
    acc_loss, acc_kl_theta_loss, cnt = 0, 0, 0
    for ind in indices:
        optimizer.zero_grad()
        data_batch = train_tokens[ind]
        sums = data_batch.sum(1).unsqueeze(1)
        normalized_data_batch = data_batch / sums
        recon_loss, kld_theta = model(data_batch, normalized_data_batch)
        total_loss = recon_loss + kld_theta
        total_loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        acc_loss += torch.sum(recon_loss).item()
        acc_kl_theta_loss += torch.sum(kld_theta).item()
        cnt += 1
        record.append([recon_loss.item(), kld_theta.item()])
    cur_loss = round(acc_loss / cnt, 2)
    cur_kl_theta = round(acc_kl_theta_loss / cnt, 2)
    record.append(params_of(model))
    print("Epoch: {} .. KL_theta: {} .. Rec_loss: {} .. NELBO: {}".format(
        epoch, cur_kl_theta, cur_loss, cur_kl_theta + cur_loss))

    # document completion: theta from the first half of each document's words, the loss on
    # the second half
    model.eval()
    with torch.no_grad():
        tokens = train_tokens[:10]
        first = torch.floor(tokens / 2)
        second = tokens - first
        theta, _ = model.get_theta(first / first.sum(1, keepdim=True).clamp(min=1))
        beta = model.get_beta()
        preds = torch.log(torch.mm(theta, beta))
        recon = -(preds * second).sum(1)
        loss = recon / second.sum(1)
        ppl_dc = round(math.exp(loss.mean().item()), 1)
        record.append(math.exp(loss.mean().item()))
        if ppl_dc < best_val:
            best_val, best_state = ppl_dc, copy.deepcopy(model.state_dict())

model.load_state_dict(best_state)
model.eval()
with torch.no_grad():
    beta = model.get_beta()
    record.append(beta.numpy().copy())
    top_words = [list(beta[k].cpu().numpy().argsort()[-4:][::-1]) for k in range(num_topics)]
    record.append([[int(w) for w in words] for words in top_words])
    recon_loss, kld = model(train_tokens[:6], train_tokens[:6] / train_tokens[:6].sum(1, True),
                            aggregate=False)
    record.append(recon_loss.numpy().copy())
    record.append(kld.item())
    theta = torch.softmax(model.mu_q_theta(model.q_theta(train_tokens[:6] /
                                                          train_tokens[:6].sum(1, True))), -1)
    record.append(theta.numpy().copy())
    fixed, _ = model(train_tokens[:6], None, theta=torch.full((6, num_topics), 1.0 / num_topics))
    record.append(fixed.item())
    record.append(sorted(name for name, p in model.named_parameters() if p.requires_grad))
"""

ETM_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "        total_loss.backward()\n"
        "        if clip > 0:\n"
        "            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)\n"
        "        optimizer.step()\n",
        "        grads = total_loss.backward()\n"
        "        if clip > 0:\n"
        "            torch.nn.utils.clip_grad_norm_(grads, model.parameters(), clip)\n"
        "        optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize(("theta_act", "train_embeddings"), [("relu", True), ("softplus", False)])
def test_embedded_topic_model_as_torch(capsys, theta_act, train_embeddings):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        ETM_SOURCE,
        ETM_STEPS,
        capsys,
        7105,
        initialize=initializer(),
        params_of=params_of,
        THETA_ACT=theta_act,
        TRAIN_EMBEDDINGS=train_embeddings,
    )
    assert len(theirs) == 3 * (3 + 2) + 7
    assert their_log == our_log and their_log.count("\n") == 3
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
