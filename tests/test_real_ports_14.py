# ruff: noqa: E501  (the program strings and the port tables quoting their lines keep a script's line breaks)
"""Real-port tests, continued (the harness: ``tests/real_ports.py``): programs written here in
the style of real PyTorch scripts, each run on torch and, ported, on retrograd from the same
weights and draws, and the records compared.

- a soft actor-critic in the style of cleanrl's SAC: ``register_buffer`` of ``torch.tensor`` of
  a NumPy expression, a tanh-squashed ``Normal(mean, std).rsample()`` policy with
  ``log_prob -= torch.log(scale * (1 - y.pow(2)) + 1e-6)`` and ``sum(1, keepdim=True)``, twin
  critics over ``torch.cat([obs, act], 1)`` under one Adam over ``list(...) + list(...)``,
  ``no_grad`` targets with ``torch.min``, entropy tuning (``torch.zeros(1,
  requires_grad=True)`` with its own Adam, ``-torch.prod(torch.Tensor(shape)).item()``,
  ``log_alpha.exp().item()``), delayed policy updates and soft updates through ``param.data``;
- neural style transfer in the style of the PyTorch tutorial: loss modules keeping
  ``target.detach()`` and setting ``self.loss`` in ``forward``, the gram matrix by
  ``torch.mm(f, f.t()).div(...)``, ``torch.tensor(tensor).view(-1, 1, 1)``, a model grown by
  ``add_module`` over ``cnn.children()`` (``nn.ReLU(inplace=False)`` swapped in) and trimmed by
  ``model[:(i + 1)]``, ``requires_grad_`` on the model and the image, ``optim.LBFGS`` with a
  closure clamping under ``no_grad``, ``score += term.loss``, ``score *= weight``, a ``[0]``
  counter;
- a CTC speech recognizer in the style of AssemblyAI's tutorial: LayerNorm between
  ``transpose(2, 3).contiguous()``, residual conv blocks with ``F.gelu`` and ``x += skip``,
  bidirectional GRUs of which the second has ``batch_first=False`` (it runs along the batch),
  ``x.view(s[0], s[1] * s[2], s[3])``, ``nn.CTCLoss(blank=28)`` on
  ``log_softmax(...).transpose(0, 1)`` with float labels (``pad_sequence`` of ``torch.Tensor``)
  and lengths as lists, AdamW under ``OneCycleLR(anneal_strategy="linear")``, a greedy decoder
  comparing 0-d tensors (``index != blank``, ``index == row[j - 1]``);
- contrastive pretraining in the style of SimCLR: a projection head built around
  ``backbone.fc``, the NT-Xent logits (``torch.cat`` of ``arange``s, ``(a.unsqueeze(0) ==
  a.unsqueeze(1)).float()``, ``F.normalize``, ``.T``, ``torch.eye(n, dtype=torch.bool)``,
  ``[~mask]`` and ``[labels.bool()]`` selections ``view``ed back), ``from torch.cuda.amp import
  GradScaler, autocast`` disabled, Adam with ``weight_decay``, ``CosineAnnealingLR(...,
  last_epoch=-1)``, top-k accuracy by ``topk(k, 1, True, True)``, ``reshape(-1).float().sum(0,
  keepdim=True)`` and ``mul_``;
- mixup and CutMix training in the style of their reference scripts: ``np.random.beta``
  scalars times tensors, ``torch.randperm``, ``x[perm, :]``, ``map(torch.autograd.Variable, ...)``,
  ``lam * guess.eq(y.data).cpu().sum().float()``, learning rates set through ``param_groups``,
  a box from ``np.clip`` bounds pasted by ``x[:, :, a:b, c:d] = x[perm, :, a:b, c:d]``, SGD
  with momentum and weight decay, label smoothing;
- PointNet-style classification and segmentation: ``Conv1d`` of kernel 1 with
  ``BatchNorm1d``, ``torch.max(x, 2, keepdim=True)[0]``, the identity added through
  ``torch.autograd.Variable(torch.from_numpy(np.eye(k).flatten().astype(np.float32))).view(1, k * k).repeat(
  b, 1)`` and ``if x.is_cuda``, ``torch.bmm`` by learned transforms, the global feature
  ``view(-1, w, 1).repeat(1, 1, n_pts)``, an orthogonality penalty (``torch.eye(d)[None, :,
  :]``, ``torch.norm(..., dim=(1, 2))``), ``scheduler.step()`` before the epoch,
  ``model = model.train()``, ``pred.data.max(1)[1]``;
- knowledge distillation in the style of the PyTorch tutorial: soft targets by
  ``softmax(t / T)`` and ``torch.sum(p * (p.log() - log_q)) / log_q.size()[0] * (T**2)``,
  ``nn.CosineEmbeddingLoss`` on ``F.avg_pool1d`` of flattened features with
  ``target=torch.ones(n)``, and a regressor variant's ``MSELoss`` on feature maps.

The regressions guarded:

- ``from torch.cuda.amp import autocast, GradScaler`` failed (``retrograd.cuda.amp`` was an
  object, not an importable module);
- ``CosineAnnealingLR(..., last_epoch=-1)`` was refused, ``StepLR`` had no ``last_epoch``, and
  the other schedulers ignored it (one built to resume at epoch 3 started over at 0);
- ``nn.CTCLoss`` refused float targets (torch casts them to int64);
- ``CosineEmbeddingLoss``, ``MarginRankingLoss`` and ``HingeEmbeddingLoss`` refused torch's
  ``target`` keyword.

Found, not changed: an infeasible CTC alignment's gradient is 0 here, NaN in torch.
"""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both
from test_real_ports_13 import SharedDraws


def _run(monkeypatch, source, step, seed, build, go, float64=False):
    """Run ``go(names, lib, models)`` once per library, with shared random draws. The
    ported run's modules (``build(names)``, a tuple) start from the torch run's initial
    states. With ``float64`` both runs use float64 as the default dtype: Adam's first steps
    have a size of about ``lr`` whatever the gradient's size, so where a gradient is nearly
    zero, float32 rounding alone decides the direction."""
    records, initial = [], None
    for lib in (torch, rg):
        with monkeypatch.context() as patch:
            if float64:
                previous = lib.get_default_dtype()
                lib.set_default_dtype(lib.float64)
            SharedDraws(seed).patch(patch, lib)
            SharedNormal(seed + 100).patch(patch, lib)
            names = both(source, step)[0 if lib is torch else 1]
            torch.manual_seed(0)
            np.random.seed(seed)
            models = build(names)
            if initial is None:
                initial = [
                    {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}
                    for m in models
                ]
            else:
                for m, state in zip(models, initial):
                    m.load_state_dict({k: rg.tensor(v) for k, v in state.items()})
            try:
                records.append(go(names, lib, models))
            finally:
                if float64:
                    lib.set_default_dtype(previous)
    return records


class SharedNormal:
    """``Normal.rsample`` of a library as ``loc + scale * eps``, ``eps`` from one seeded
    stream for both libraries."""

    def __init__(self, seed):
        self.seed = seed

    def patch(self, monkeypatch, lib):
        rng = np.random.default_rng(self.seed)

        def rsample(self, sample_shape=()):
            eps = lib.tensor(rng.standard_normal(tuple(self.loc.shape)), dtype=self.loc.dtype)
            return self.loc + self.scale * eps

        monkeypatch.setattr(lib.distributions.Normal, "rsample", rsample)


# -- SAC -------------------------------------------------------------------------------------------
SAC_SOURCE = """
class Critic(nn.Module):
    def __init__(self, obs_dim, act_dim, width=12):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim + act_dim, width), nn.ReLU(), nn.Linear(width, 1))

    def forward(self, obs, act):
        return self.net(torch.cat([obs, act], 1))


class SquashedPolicy(nn.Module):
    def __init__(self, env, width=12):
        super().__init__()
        space = env.single_action_space
        obs_dim = int(np.array(env.single_observation_space.shape).prod())
        act_dim = int(np.prod(space.shape))
        self.body = nn.Sequential(nn.Linear(obs_dim, width), nn.ReLU())
        self.mu = nn.Linear(width, act_dim)
        self.log_sigma = nn.Linear(width, act_dim)
        # the box [low, high] as a centre and a half-width, moved with the module
        self.register_buffer("half_width", torch.tensor((space.high - space.low) / 2.0, dtype=torch.float32))
        self.register_buffer("centre", torch.tensor((space.high + space.low) / 2.0, dtype=torch.float32))

    def sample(self, obs):
        h = self.body(obs)
        mu = self.mu(h)
        log_sigma = -4.0 + 2.5 * (torch.tanh(self.log_sigma(h)) + 1)
        dist = torch.distributions.Normal(mu, log_sigma.exp())
        raw = dist.rsample()
        squashed = torch.tanh(raw)
        logp = dist.log_prob(raw)
        # change of variables through tanh and the rescaling
        logp -= torch.log(self.half_width * (1 - squashed.pow(2)) + 1e-6)
        return squashed * self.half_width + self.centre, logp.sum(1, keepdim=True)


def sac(args, env, policy, q_a, q_b, q_a_slow, q_b_slow):
    q_a_slow.load_state_dict(q_a.state_dict())
    q_b_slow.load_state_dict(q_b.state_dict())
    critic_opt = optim.Adam(list(q_a.parameters()) + list(q_b.parameters()), lr=args.q_lr)
    policy_opt = optim.Adam(list(policy.parameters()), lr=args.policy_lr)
    if args.autotune:
        entropy_goal = -torch.prod(torch.Tensor(env.single_action_space.shape)).item()
        log_alpha = torch.zeros(1, requires_grad=True)
        ent_coef = log_alpha.exp().item()
        alpha_opt = optim.Adam([log_alpha], lr=args.q_lr)
    else:
        ent_coef = args.alpha
    memory = []
    obs, _ = env.reset(seed=args.seed)
    out = []
    for t in range(args.total_timesteps):
        if t < args.learning_starts:
            act = np.stack([env.single_action_space.sample() for _ in range(env.num_envs)])
        else:
            act = policy.sample(torch.Tensor(obs))[0].detach().cpu().numpy()
        nxt, rew, term, _, _ = env.step(act)
        memory += [(o, a, r, n, d) for o, a, r, n, d in zip(obs, act, rew, nxt, term)]
        obs = nxt
        if t <= args.learning_starts:
            continue
        picks = args.rng.integers(0, len(memory), args.batch_size)
        o, a, r, n, d = (torch.tensor(np.array(col, np.float32)) for col in zip(*[memory[i] for i in picks]))
        with torch.no_grad():
            n_act, n_logp = policy.sample(n)
            soft = torch.min(q_a_slow(n, n_act), q_b_slow(n, n_act)) - ent_coef * n_logp
            target = r + (1 - d) * args.gamma * soft.view(-1)
        qa, qb = q_a(o, a).view(-1), q_b(o, a).view(-1)
        critic_loss = F.mse_loss(qa, target) + F.mse_loss(qb, target)
        critic_opt.zero_grad()
        critic_loss.backward()
        critic_opt.step()
        out.append([qa.mean().item(), critic_loss.item()])
        if t % args.policy_frequency == 0:
            for _ in range(args.policy_frequency):
                pi, logp = policy.sample(o)
                policy_loss = (ent_coef * logp - torch.min(q_a(o, pi), q_b(o, pi))).mean()
                policy_opt.zero_grad()
                policy_loss.backward()
                policy_opt.step()
                if args.autotune:
                    with torch.no_grad():
                        _, logp = policy.sample(o)
                    temperature_loss = (-log_alpha.exp() * (logp + entropy_goal)).mean()
                    alpha_opt.zero_grad()
                    temperature_loss.backward()
                    alpha_opt.step()
                    ent_coef = log_alpha.exp().item()
                out.append([policy_loss.item(), ent_coef])
        for net, slow in ((q_a, q_a_slow), (q_b, q_b_slow)):
            for p, p_slow in zip(net.parameters(), slow.parameters()):
                p_slow.data.copy_(args.tau * p.data + (1 - args.tau) * p_slow.data)
    nets = (policy, q_a, q_b, q_a_slow, q_b_slow)
    out.append({f"{i}.{k}": v.detach().numpy().copy() for i, m in enumerate(nets) for k, v in m.state_dict().items()})
    return out
"""

SAC_STEP = [
    (
        "        critic_loss.backward()\n        critic_opt.step()",
        "        critic_grads = critic_loss.backward()\n        critic_opt.step(critic_grads)",
    ),
    (
        "                policy_loss.backward()\n                policy_opt.step()",
        "                policy_grads = policy_loss.backward()\n                policy_opt.step(policy_grads)",
    ),
    (
        "                    temperature_loss.backward()\n                    alpha_opt.step()",
        "                    alpha_grads = temperature_loss.backward()\n                    alpha_opt.step(alpha_grads)",
    ),
]


class PendulumLike:
    """Two copies of a small continuous-control task (observation 3, action 2 in [-2, 2])."""

    def __init__(self, n, seed):
        self.num_envs, self.rng = n, np.random.default_rng(seed)
        space_rng = np.random.default_rng(seed + 1)
        self.single_observation_space = types.SimpleNamespace(shape=(3,))
        self.single_action_space = types.SimpleNamespace(
            shape=(2,),
            high=np.array([2.0, 1.0], np.float32),
            low=np.array([-2.0, -1.0], np.float32),
            sample=lambda: space_rng.uniform(-1.0, 1.0, 2).astype(np.float32),
        )

    def reset(self, seed=None):
        self.state = self.rng.standard_normal((self.num_envs, 3)).astype(np.float32)
        return self.state, {}

    def step(self, actions):
        actions = np.asarray(actions, np.float32)
        self.state = np.tanh(
            0.8 * self.state + 0.3 * np.concatenate([actions, actions[:, :1]], 1)
        ).astype(np.float32)
        reward = -(self.state**2).sum(1) - 0.1 * (actions**2).sum(1)
        done = self.rng.random(self.num_envs) < 0.1
        return self.state, reward.astype(np.float32), done, np.zeros(self.num_envs, bool), {}


@pytest.mark.parametrize("autotune", [True, False])
def test_sac_in_the_style_of_cleanrl_matches_torch(monkeypatch, autotune):
    args = types.SimpleNamespace(
        seed=1, q_lr=1e-3, policy_lr=3e-4, autotune=autotune, alpha=0.2, total_timesteps=7,
        learning_starts=3, batch_size=5, gamma=0.99, tau=0.05, policy_frequency=2,
    )  # fmt: skip

    def build(names):
        env = PendulumLike(2, 0)
        return (names["SquashedPolicy"](env), *(names["Critic"](3, 2) for _ in range(4)))

    def go(names, lib, models):
        args.rng = np.random.default_rng(5)
        return names["sac"](args, PendulumLike(2, 0), *models)

    records = _run(monkeypatch, SAC_SOURCE, SAC_STEP, 2, build, go)
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


# -- neural style transfer -------------------------------------------------------------------------
STYLE_SOURCE = """
def gram(fmap):
    n, c, h, w = fmap.size()
    flat = fmap.view(n * c, h * w)
    return torch.mm(flat, flat.t()).div(n * c * h * w)


class ContentTerm(nn.Module):
    def __init__(self, reference):
        super().__init__()
        self.reference = reference.detach()

    def forward(self, x):
        self.loss = F.mse_loss(x, self.reference)
        return x  # transparent: the loss rides along on the module


class StyleTerm(nn.Module):
    def __init__(self, reference):
        super().__init__()
        self.reference = gram(reference).detach()

    def forward(self, x):
        self.loss = F.mse_loss(gram(x), self.reference)
        return x


class Standardize(nn.Module):
    def __init__(self, centre, spread):
        super().__init__()
        self.centre = torch.tensor(centre).view(-1, 1, 1)
        self.spread = torch.tensor(spread).view(-1, 1, 1)

    def forward(self, img):
        return (img - self.centre) / self.spread


def build_loss_model(cnn, mean, std, content_img, style_img, content_at=("conv_2",), style_at=("conv_1", "conv_2", "conv_3")):
    model = nn.Sequential(Standardize(mean, std))
    contents, styles = [], []
    convs = 0
    for layer in cnn.children():
        kind = type(layer)
        if kind is nn.Conv2d:
            convs += 1
            name = f"conv_{convs}"
        elif kind is nn.ReLU:
            name, layer = f"relu_{convs}", nn.ReLU(inplace=False)
        elif kind is nn.MaxPool2d:
            name = f"pool_{convs}"
        else:
            raise RuntimeError(f"unexpected layer {layer.__class__.__name__}")
        model.add_module(name, layer)
        if name in content_at:
            term = ContentTerm(model(content_img))
            model.add_module(f"content_{convs}", term)
            contents.append(term)
        if name in style_at:
            term = StyleTerm(model(style_img))
            model.add_module(f"style_{convs}", term)
            styles.append(term)
    last = max(i for i, m in enumerate(model) if isinstance(m, (ContentTerm, StyleTerm)))
    return model[:(last + 1)], styles, contents


def transfer(cnn, content_img, style_img, steps=4, style_weight=1e4, content_weight=1.0):
    model, styles, contents = build_loss_model(cnn, torch.tensor([0.5, 0.4, 0.4]), torch.tensor([0.2, 0.2, 0.25]), content_img, style_img)
    model.requires_grad_(False)
    img = content_img.clone()
    img.requires_grad_(True)
    opt = optim.LBFGS([img])
    calls, scores = [0], []

    while calls[0] <= steps:
        def closure():
            with torch.no_grad():
                img.clamp_(0, 1)
            opt.zero_grad()
            model(img)
            style_part = 0
            content_part = 0
            for term in styles:
                style_part += term.loss
            for term in contents:
                content_part += term.loss
            style_part *= style_weight
            content_part *= content_weight
            total = style_part + content_part
            total.backward()
            calls[0] += 1
            scores.append([style_part.item(), content_part.item()])
            return style_part + content_part

        opt.step(closure)
    with torch.no_grad():
        img.clamp_(0, 1)
    return [np.array(scores), len(model), img.detach().numpy().copy()]


def small_cnn():
    return nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(6, 6, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(6, 8, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(inplace=True),
    )
"""

STYLE_STEP = [
    ("            total.backward()\n", "            grads = total.backward()\n"),
    (
        "            return style_part + content_part\n",
        "            return style_part + content_part, grads\n",
    ),
]


def test_style_transfer_with_lbfgs_on_the_image_matches_torch(monkeypatch):
    rng = np.random.default_rng(3)
    content, style = rng.uniform(0, 1, (1, 3, 10, 10)), rng.uniform(0, 1, (1, 3, 10, 10))

    def go(names, lib, models):
        images = (lib.tensor(content, dtype=lib.float32), lib.tensor(style, dtype=lib.float32))
        return names["transfer"](models[0].eval(), *images)

    records = _run(monkeypatch, STYLE_SOURCE, STYLE_STEP, 3, lambda n: (n["small_cnn"](),), go)
    # standardize, conv_1..conv_3 with their relus, the pool, three style terms, one content
    # term: trimmed after style_3, before relu_3
    assert records[0][1] == records[1][1] == 11
    assert_records_agree(records[1], records[0], rtol=2e-3, atol=2e-4)


# -- speech recognition with CTC -------------------------------------------------------------------
SPEECH_SOURCE = """
ALPHABET = " abcdefghijklmnopqrstuvwxyz'"  # indices 0..27; 28 is the CTC blank
BLANK = len(ALPHABET)


def encode(text):
    return [ALPHABET.index(ch) for ch in text]


def decode(indices):
    return "".join(ALPHABET[i] for i in indices)


class FeatureNorm(nn.Module):
    # LayerNorm over the frequency axis of (batch, channel, freq, time)
    def __init__(self, n_freq):
        super().__init__()
        self.norm = nn.LayerNorm(n_freq)

    def forward(self, x):
        return self.norm(x.transpose(2, 3).contiguous()).transpose(2, 3).contiguous()


class ResBlock(nn.Module):
    def __init__(self, channels, n_freq, dropout):
        super().__init__()
        self.norm1, self.norm2 = FeatureNorm(n_freq), FeatureNorm(n_freq)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        skip = x
        x = self.conv1(self.drop(F.gelu(self.norm1(x))))
        x = self.conv2(self.drop(F.gelu(self.norm2(x))))
        x += skip
        return x


class BiGRU(nn.Module):
    def __init__(self, size, hidden, batch_first):
        super().__init__()
        self.norm = nn.LayerNorm(size)
        self.gru = nn.GRU(size, hidden, num_layers=1, batch_first=batch_first, bidirectional=True)

    def forward(self, x):
        out, _ = self.gru(F.gelu(self.norm(x)))
        return out


class Recognizer(nn.Module):
    def __init__(self, n_feats=8, channels=2, hidden=6, n_classes=BLANK + 1, n_rnn=2, dropout=0.1):
        super().__init__()
        n_feats //= 2
        self.stem = nn.Conv2d(1, channels, 3, stride=2, padding=1)
        self.res = nn.Sequential(ResBlock(channels, n_feats, dropout))
        self.proj = nn.Linear(channels * n_feats, hidden)
        # the second GRU is built with batch_first=False and so runs along the batch axis
        self.rnns = nn.Sequential(*[BiGRU(hidden if i == 0 else 2 * hidden, hidden, batch_first=i == 0) for i in range(n_rnn)])
        self.head = nn.Linear(2 * hidden, n_classes)

    def forward(self, x):
        x = self.res(self.stem(x))
        sizes = x.size()
        x = x.view(sizes[0], sizes[1] * sizes[2], sizes[3]).transpose(1, 2)
        return self.head(self.rnns(self.proj(x)))


def collate(batch):
    specs, targets, input_lengths, target_lens = [], [], [], []
    for spec, text in batch:
        specs.append(spec.squeeze(0).transpose(0, 1))
        label = torch.Tensor(encode(text))
        targets.append(label)
        input_lengths.append(spec.shape[-1] // 2)
        target_lens.append(label.shape[0])
    specs = nn.utils.rnn.pad_sequence(specs, batch_first=True).unsqueeze(1).transpose(2, 3)
    targets = nn.utils.rnn.pad_sequence(targets, batch_first=True)
    return specs, targets, input_lengths, target_lens


def greedy(output, labels, label_lengths):
    best = torch.argmax(output, dim=2)
    guesses, truths = [], []
    for i, row in enumerate(best):
        truths.append(decode([int(v) for v in labels[i][:label_lengths[i]].tolist()]))
        kept = []
        for j, index in enumerate(row):
            if index != BLANK and not (j != 0 and index == row[j - 1]):
                kept.append(index.item())
        guesses.append(decode(kept))
    return guesses, truths


def fit(model, data, epochs=2, batch_size=2, lr=5e-4):
    batches = [collate(data[i:i + batch_size]) for i in range(0, len(data), batch_size)]
    criterion = nn.CTCLoss(blank=BLANK)
    opt = optim.AdamW(model.parameters(), lr)
    sched = optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, steps_per_epoch=len(batches), epochs=epochs, anneal_strategy="linear")
    log = []
    for _ in range(epochs):
        model.train()
        for specs, labels, input_lengths, label_lengths in batches:
            opt.zero_grad()
            log_probs = F.log_softmax(model(specs), dim=2).transpose(0, 1)
            loss = criterion(log_probs, labels, input_lengths, label_lengths)
            loss.backward()
            opt.step()
            sched.step()
            log.append([loss.item(), sched.get_last_lr()[0]])
        model.eval()
        with torch.no_grad():
            specs, labels, input_lengths, label_lengths = batches[0]
            out = F.log_softmax(model(specs), dim=2)
            guesses, truths = greedy(out, labels, label_lengths)
            log.append(guesses + truths)
    log.append({k: p.detach().numpy().copy() for k, p in model.named_parameters()})
    return log
"""

SPEECH_STEP = [
    ("            loss.backward()\n", "            grads = loss.backward()\n"),
    ("            opt.step()\n", "            opt.step(grads)\n"),
]


def test_ctc_speech_recognizer_matches_torch(monkeypatch):
    rng = np.random.default_rng(9)
    # each feasible: at least as many frames after the stride as labels (an infeasible one's
    # loss is inf in torch, its gradient NaN)
    words = ["yes", "no", "go", "hi"]
    spectrograms = [rng.standard_normal((1, 8, t)) for t in (10, 8, 12, 6)]

    def go(names, lib, models):
        data = [(lib.tensor(s, dtype=lib.float32), w) for w, s in zip(words, spectrograms)]
        return names["fit"](models[0], data)

    records = _run(monkeypatch, SPEECH_SOURCE, SPEECH_STEP, 4, lambda n: (n["Recognizer"](),), go)
    # the biases of the stem and of conv1 are constant over the features a FeatureNorm then
    # normalizes: their true gradient is 0, so AdamW's steps follow the rounding noise
    skip = ["stem.bias", "res.0.conv1.bias"]
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5, skip=skip)


# -- SimCLR ----------------------------------------------------------------------------------------
SIMCLR_SOURCE = """
from torch.cuda.amp import autocast, GradScaler


class SmallEncoder(nn.Module):
    def __init__(self, out_dim):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1, bias=False)  # BatchNorm follows
        self.bn = nn.BatchNorm2d(6)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(6, out_dim)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(F.relu(self.bn(self.conv(x)))), 1))


class ContrastiveNet(nn.Module):
    def __init__(self, out_dim):
        super().__init__()
        self.backbone = SmallEncoder(out_dim)
        width = self.backbone.fc.in_features
        # a projection MLP: a hidden layer slid in front of the encoder's own fc
        self.backbone.fc = nn.Sequential(nn.Linear(width, width), nn.ReLU(), self.backbone.fc)

    def forward(self, x):
        return self.backbone(x)


def nt_xent_logits(features, batch_size, n_views, temperature):
    ids = torch.cat([torch.arange(batch_size) for _ in range(n_views)], dim=0)
    same = (ids.unsqueeze(0) == ids.unsqueeze(1)).float()
    unit = F.normalize(features, dim=1)
    sim = torch.matmul(unit, unit.T)
    self_pairs = torch.eye(same.shape[0], dtype=torch.bool)
    same = same[~self_pairs].view(same.shape[0], -1)
    sim = sim[~self_pairs].view(sim.shape[0], -1)
    pos = sim[same.bool()].view(same.shape[0], -1)
    neg = sim[~same.bool()].view(sim.shape[0], -1)
    logits = torch.cat([pos, neg], dim=1) / temperature
    return logits, torch.zeros(logits.shape[0], dtype=torch.long)


def topk_accuracy(output, target, topk=(1,)):
    with torch.no_grad():
        maxk = max(topk)
        _, top = output.topk(maxk, 1, True, True)
        hits = top.t().eq(target.view(1, -1).expand_as(top.t()))
        return [hits[:k].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / target.size(0)) for k in topk]


def pretrain(model, loader, cfg):
    opt = torch.optim.Adam(model.parameters(), cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=len(loader), eta_min=0, last_epoch=-1)
    scaler = GradScaler(enabled=cfg.fp16)
    criterion = nn.CrossEntropyLoss()
    history = []
    for _ in range(cfg.epochs):
        for views, _ in loader:
            images = torch.cat(views, dim=0)
            with autocast(enabled=cfg.fp16):
                logits, labels = nt_xent_logits(model(images), cfg.batch_size, len(views), cfg.temperature)
                loss = criterion(logits, labels)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            top1, top3 = topk_accuracy(logits, labels, topk=(1, 3))
            history.append([loss.item(), top1[0].item(), top3[0].item(), sched.get_last_lr()[0]])
        sched.step()
    history.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
    return history
"""

SIMCLR_STEP = [
    (
        "            scaler.scale(loss).backward()\n            scaler.step(opt)",
        "            grads = scaler.scale(loss).backward()\n            scaler.step(opt, grads)",
    ),
]


def test_simclr_style_contrastive_pretraining_matches_torch(monkeypatch):
    cfg = types.SimpleNamespace(
        batch_size=4, temperature=0.1, fp16=False, epochs=2, lr=3e-3, weight_decay=1e-4
    )
    rng = np.random.default_rng(6)
    images = rng.standard_normal((2, 4, 3, 5, 5))
    jitter = 0.1 * rng.standard_normal((2, 2, 4, 3, 5, 5))

    def go(names, lib, models):
        loader = [
            ([lib.tensor(images[b] + jitter[b, v], dtype=lib.float32) for v in range(2)], None)
            for b in range(2)
        ]
        return names["pretrain"](models[0], loader, cfg)

    records = _run(
        monkeypatch, SIMCLR_SOURCE, SIMCLR_STEP, 6, lambda n: (n["ContrastiveNet"](5),), go
    )
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


def test_torch_cuda_amp_names_import_as_torch_s():
    from retrograd.cuda.amp import GradScaler, autocast

    scaler = GradScaler(enabled=False)
    loss = rg.tensor(2.0, requires_grad=True) * 3.0
    assert scaler.scale(loss) is loss  # disabled: the identity, as torch's
    with autocast(enabled=False):
        assert (rg.ones(2) * 2).dtype == rg.float32
    assert rg.cuda.amp.GradScaler is GradScaler


# -- mixup and CutMix ------------------------------------------------------------------------------
MIXUP_SOURCE = """
class TinyConvNet(nn.Module):
    def __init__(self, classes=4):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, classes)

    def forward(self, x):
        return self.fc(F.max_pool2d(F.relu(self.conv(x)), 2).flatten(1))


def blend(x, y, alpha):
    lam = np.random.beta(alpha, alpha) if alpha > 0 else 1.0
    perm = torch.randperm(x.size(0))
    return lam * x + (1 - lam) * x[perm, :], y, y[perm], lam


def box_for(size, lam):
    h, w = size[2], size[3]
    side = np.sqrt(1.0 - lam)
    bh, bw = int(h * side), int(w * side)
    cy, cx = np.random.randint(h), np.random.randint(w)
    y0, y1 = np.clip(cy - bh // 2, 0, h), np.clip(cy + bh // 2, 0, h)
    x0, x1 = np.clip(cx - bw // 2, 0, w), np.clip(cx + bw // 2, 0, w)
    return y0, x0, y1, x1


def mixup_epoch(net, loader, opt, criterion, cfg):
    net.train()
    seen, hits, total = 0, 0.0, 0.0
    for x, y in loader:
        x, y_a, y_b, lam = blend(x, y, cfg.alpha)
        x, y_a, y_b = map(torch.autograd.Variable, (x, y_a, y_b))
        out = net(x)
        loss = lam * criterion(out, y_a) + (1 - lam) * criterion(out, y_b)
        total += loss.item()
        _, guess = torch.max(out.data, 1)
        seen += y.size(0)
        hits += (lam * guess.eq(y_a.data).cpu().sum().float() + (1 - lam) * guess.eq(y_b.data).cpu().sum().float())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return total / len(loader), float(hits) / seen


def cutmix_epoch(net, loader, opt, criterion, cfg):
    net.train()
    losses = []
    for x, y in loader:
        if cfg.beta > 0 and np.random.rand(1) < cfg.cutmix_prob:
            lam = np.random.beta(cfg.beta, cfg.beta)
            perm = torch.randperm(x.size()[0])
            y0, x0, y1, x1 = box_for(x.size(), lam)
            x[:, :, y0:y1, x0:x1] = x[perm, :, y0:y1, x0:x1]
            lam = 1 - ((y1 - y0) * (x1 - x0) / (x.size()[-1] * x.size()[-2]))  # the area really pasted
            out = net(x)
            loss = criterion(out, y) * lam + criterion(out, y[perm]) * (1.0 - lam)
        else:
            out = net(x)
            loss = criterion(out, y)
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return losses


def set_lr(opt, epoch, cfg):
    lr = cfg.lr * (0.5 ** epoch)
    for group in opt.param_groups:
        group["lr"] = lr


def run(net, loader, cfg):
    criterion = nn.CrossEntropyLoss(label_smoothing=cfg.smoothing)
    opt = optim.SGD(net.parameters(), lr=cfg.lr, momentum=0.9, weight_decay=cfg.decay)
    log = []
    for epoch in range(2):
        set_lr(opt, epoch, cfg)
        log.append(list(mixup_epoch(net, loader, opt, criterion, cfg)))
        log.append(cutmix_epoch(net, loader, opt, criterion, cfg))
    log.append({k: v.detach().numpy().copy() for k, v in net.state_dict().items()})
    return log
"""

MIXUP_STEP = [
    (
        "        opt.zero_grad()\n        loss.backward()\n        opt.step()\n",
        "        opt.zero_grad()\n        grads = loss.backward()\n        opt.step(grads)\n",
    ),
]


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_mixup_and_cutmix_training_matches_torch(monkeypatch, smoothing):
    cfg = types.SimpleNamespace(
        alpha=1.0, beta=1.0, cutmix_prob=0.7, lr=0.1, decay=1e-4, smoothing=smoothing
    )
    rng = np.random.default_rng(8)
    x, y = rng.standard_normal((12, 3, 8, 8)), rng.integers(0, 4, 12)

    def go(names, lib, models):
        loader = [
            (lib.tensor(x[i : i + 4], dtype=lib.float32), lib.tensor(y[i : i + 4]))
            for i in range(0, 12, 4)
        ]
        return names["run"](models[0], loader, cfg)

    records = _run(monkeypatch, MIXUP_SOURCE, MIXUP_STEP, 7, lambda n: (n["TinyConvNet"](),), go)
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


# -- PointNet --------------------------------------------------------------------------------------
POINTNET_SOURCE = """
def pointwise(c_in, c_out):
    # a shared per-point linear map: Conv1d of kernel 1, then BatchNorm1d and ReLU
    return nn.Sequential(nn.Conv1d(c_in, c_out, 1), nn.BatchNorm1d(c_out), nn.ReLU())


class AlignNet(nn.Module):
    # predicts a k x k transform, learned as a residual on the identity
    def __init__(self, k, width=8):
        super().__init__()
        self.k = k
        self.point_mlp = nn.Sequential(pointwise(k, width), pointwise(width, 2 * width))
        self.head = nn.Sequential(nn.Linear(2 * width, width), nn.ReLU(), nn.Linear(width, k * k))

    def forward(self, x):
        batch = x.size()[0]
        x = torch.max(self.point_mlp(x), 2, keepdim=True)[0].view(-1, self.head[0].in_features)
        eye = torch.autograd.Variable(torch.from_numpy(np.eye(self.k).flatten().astype(np.float32))).view(1, self.k * self.k).repeat(batch, 1)
        if x.is_cuda:
            eye = eye.cuda()
        return (self.head(x) + eye).view(-1, self.k, self.k)


class PointEncoder(nn.Module):
    def __init__(self, width=8, per_point=False):
        super().__init__()
        self.per_point, self.width = per_point, width
        self.input_align = AlignNet(3)
        self.lift = pointwise(3, 4)
        self.feature_align = AlignNet(4)
        self.deep = nn.Sequential(nn.Conv1d(4, width, 1), nn.BatchNorm1d(width))

    def forward(self, x):
        n_pts = x.size()[2]
        t_in = self.input_align(x)
        x = torch.bmm(x.transpose(2, 1), t_in).transpose(2, 1)
        x = self.lift(x)
        t_feat = self.feature_align(x)
        local = torch.bmm(x.transpose(2, 1), t_feat).transpose(2, 1)
        glob = torch.max(self.deep(local), 2, keepdim=True)[0].view(-1, self.width)
        if not self.per_point:
            return glob, t_feat
        glob = glob.view(-1, self.width, 1).repeat(1, 1, n_pts)
        return torch.cat([glob, local], 1), t_feat


class Classifier(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.encoder = PointEncoder()
        self.fc = nn.Sequential(nn.Linear(8, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Dropout(p=0.3), nn.Linear(6, k))

    def forward(self, x):
        glob, t_feat = self.encoder(x)
        return F.log_softmax(self.fc(glob), dim=1), t_feat


class Segmenter(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k
        self.encoder = PointEncoder(per_point=True)
        self.head = nn.Sequential(pointwise(12, 6), nn.Conv1d(6, k, 1))

    def forward(self, x):
        batch, _, n_pts = x.size()
        feats, t_feat = self.encoder(x)
        scores = self.head(feats).transpose(2, 1).contiguous()
        return F.log_softmax(scores.view(-1, self.k), dim=-1).view(batch, n_pts, self.k), t_feat


def orthogonality_penalty(t):
    d = t.size()[1]
    eye = torch.eye(d)[None, :, :]
    return torch.mean(torch.norm(torch.bmm(t, t.transpose(2, 1)) - eye, dim=(1, 2)))


def train(model, loader, epochs, segment):
    opt = optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999))
    sched = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    log = []
    for epoch in range(epochs):
        sched.step()  # stepped before the epoch, as older training loops did
        for points, target in loader:
            x = points.transpose(2, 1)
            opt.zero_grad()
            model = model.train()
            pred, t_feat = model(x)
            if segment:
                pred = pred.view(-1, model.k)
                target = target.view(-1) - 1
            else:
                target = target[:, 0]
            loss = F.nll_loss(pred, target) + 0.001 * orthogonality_penalty(t_feat)
            loss.backward()
            opt.step()
            choice = pred.data.max(1)[1]
            log.append([loss.item(), choice.eq(target.data).cpu().sum().item()])
    log.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
    return log
"""

POINTNET_STEP = [
    (
        "            loss.backward()\n            opt.step()\n",
        "            grads = loss.backward()\n            opt.step(grads)\n",
    ),
]


@pytest.mark.parametrize("task", ["classification", "segmentation"])
def test_pointnet_style_training_matches_torch(monkeypatch, task):
    segment = task == "segmentation"
    rng = np.random.default_rng(10)
    points = rng.standard_normal((8, 10, 3))
    labels = rng.integers(1, 4, (8, 10)) if segment else rng.integers(0, 2, (8, 1))

    def go(names, lib, models):
        loader = [(lib.tensor(points[i : i + 4]), lib.tensor(labels[i : i + 4])) for i in (0, 4)]
        return names["train"](models[0], loader, 1, segment)

    def build(names):
        return (names["Segmenter"](3) if segment else names["Classifier"](2),)

    records = _run(monkeypatch, POINTNET_SOURCE, POINTNET_STEP, 11, build, go, float64=True)
    assert_records_agree(records[1], records[0], rtol=1e-6, atol=1e-7)


# -- knowledge distillation ------------------------------------------------------------------------
DISTILL_SOURCE = """
class ConvNet(nn.Module):
    # returns (logits, flattened features, last feature map)
    def __init__(self, channels, hidden, classes=5):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Linear(channels * 4, hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, classes))

    def forward(self, x):
        fmap = self.body(x)
        flat = torch.flatten(fmap, 1)
        return self.head(flat), flat, fmap


class Student(ConvNet):
    def __init__(self):
        super().__init__(channels=2, hidden=6)
        self.adapter = nn.Conv2d(2, 4, 1)  # lifts the student's map to the teacher's channels


def distill(teacher, student, loader, mode, T=2.0, hint_weight=0.3, epochs=2):
    ce = nn.CrossEntropyLoss()
    cosine = nn.CosineEmbeddingLoss()
    mse = nn.MSELoss()
    opt = optim.Adam(student.parameters(), lr=1e-3)
    teacher.eval()
    student.train()
    log = []
    for _ in range(epochs):
        total = 0.0
        for x, y in loader:
            opt.zero_grad()
            with torch.no_grad():
                t_logits, t_flat, t_map = teacher(x)
            s_logits, s_flat, s_map = student(x)
            if mode == "soft_targets":
                soft = F.softmax(t_logits / T, dim=-1)
                log_q = F.log_softmax(s_logits / T, dim=-1)
                hint = torch.sum(soft * (soft.log() - log_q)) / log_q.size()[0] * (T ** 2)
            elif mode == "cosine":
                # the teacher's wider features averaged pairwise down to the student's width
                t_small = F.avg_pool1d(t_flat, 2)
                hint = cosine(s_flat, t_small, target=torch.ones(x.size(0)))
            else:
                hint = mse(student.adapter(s_map), t_map)
            loss = hint_weight * hint + (1 - hint_weight) * ce(s_logits, y)
            loss.backward()
            opt.step()
            total += loss.item()
        log.append(total / len(loader))
    log.append({k: p.detach().numpy().copy() for k, p in student.named_parameters()})
    return log
"""

DISTILL_STEP = [
    (
        "            loss.backward()\n            opt.step()\n",
        "            grads = loss.backward()\n            opt.step(grads)\n",
    ),
]


@pytest.mark.parametrize("mode", ["soft_targets", "cosine", "regressor"])
def test_knowledge_distillation_matches_torch(monkeypatch, mode):
    rng = np.random.default_rng(12)
    x, y = rng.standard_normal((8, 3, 8, 8)), rng.integers(0, 5, 8)

    def go(names, lib, models):
        loader = [
            (lib.tensor(x[i : i + 4], dtype=lib.float32), lib.tensor(y[i : i + 4])) for i in (0, 4)
        ]
        return names["distill"](*models, loader, mode)

    def build(names):
        return names["ConvNet"](channels=4, hidden=8), names["Student"]()

    records = _run(monkeypatch, DISTILL_SOURCE, DISTILL_STEP, 13, build, go)
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


# -- the defects found -----------------------------------------------------------------------------
SCHEDULERS = {
    "StepLR": lambda lr, o, e: lr.StepLR(o, 2, 0.5, last_epoch=e),
    "CosineAnnealingLR": lambda lr, o, e: lr.CosineAnnealingLR(o, T_max=6, eta_min=0, last_epoch=e),
    "LambdaLR": lambda lr, o, e: lr.LambdaLR(o, lambda k: 0.8**k, last_epoch=e),
    "MultiStepLR": lambda lr, o, e: lr.MultiStepLR(o, [2, 4], 0.5, last_epoch=e),
    "ExponentialLR": lambda lr, o, e: lr.ExponentialLR(o, 0.9, last_epoch=e),
    "LinearLR": lambda lr, o, e: lr.LinearLR(o, 0.5, 1.0, 4, last_epoch=e),
    "ConstantLR": lambda lr, o, e: lr.ConstantLR(o, 0.5, 4, last_epoch=e),
    "PolynomialLR": lambda lr, o, e: lr.PolynomialLR(o, 6, 2.0, last_epoch=e),
}


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_a_scheduler_built_with_last_epoch_resumes_where_torch_s_does(name):
    """Three steps, then a new optimizer holding the third step's rate (as a loaded optimizer
    state holds it, with ``initial_lr``) and a scheduler built with ``last_epoch=2`` (its
    construction steps it to 3): the rates go on as in the uninterrupted run, in both
    libraries."""
    runs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's, on scheduler steps without optimizer steps
        for lib in (torch, rg):
            schedule = SCHEDULERS[name]
            optimizer = lib.optim.SGD([lib.nn.Parameter(lib.ones(1))], lr=1.0)
            scheduler = schedule(lib.optim.lr_scheduler, optimizer, -1)
            rates = []
            for _ in range(3):
                scheduler.step()
                rates.append(optimizer.param_groups[0]["lr"])
            resumed = lib.optim.SGD([lib.nn.Parameter(lib.ones(1))], lr=rates[-1])
            resumed.param_groups[0]["initial_lr"] = 1.0
            later = schedule(lib.optim.lr_scheduler, resumed, 2)  # built after epoch 2's step
            rates.append(later.last_epoch)
            for _ in range(3):
                later.step()
                scheduler.step()
                rates += [resumed.param_groups[0]["lr"], optimizer.param_groups[0]["lr"]]
            runs.append(rates)
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-12)
    np.testing.assert_allclose(runs[1][4::2], runs[1][5::2], rtol=1e-12)


def test_ctc_loss_takes_float_targets_as_torch_casts_them():
    log_probs = np.random.default_rng(0).standard_normal((6, 2, 5))
    values = []
    for lib in (torch, rg):
        lp = lib.tensor(log_probs).log_softmax(2)
        floats = lib.nn.CTCLoss(blank=4)(
            lp, lib.tensor([[1.0, 2.0, 2.0], [3.0, 0.0, 0.0]]), [6, 5], [3, 1]
        )
        ints = lib.nn.functional.ctc_loss(
            lp, lib.tensor([[1, 2, 2], [3, 0, 0]]), [6, 5], [3, 1], blank=4
        )
        truncated = lib.nn.functional.ctc_loss(
            lp[:, :1], lib.tensor([[1.7, 2.2, 2.9]]), [6], [3], blank=4
        )
        values.append([floats.item(), ints.item(), truncated.item()])
    np.testing.assert_allclose(values[1], values[0], rtol=1e-12)
    assert values[1][0] == values[1][1]


def test_margin_losses_take_torch_s_keywords():
    rng = np.random.default_rng(1)
    a, b, t = (
        rng.standard_normal((4, 3)),
        rng.standard_normal((4, 3)),
        np.array([1.0, -1.0, 1.0, -1.0]),
    )
    values = []
    for lib in (torch, rg):
        x1, x2, target = lib.tensor(a), lib.tensor(b), lib.tensor(t)
        values.append(
            [
                lib.nn.CosineEmbeddingLoss(margin=0.1)(x1, x2, target=target).item(),
                lib.nn.CosineEmbeddingLoss()(input1=x1, input2=x2, target=target).item(),
                lib.nn.MarginRankingLoss(margin=0.2)(x1[:, 0], x2[:, 0], target=target).item(),
                lib.nn.HingeEmbeddingLoss()(x1[:, 0], target=target).item(),
            ]
        )
    np.testing.assert_allclose(values[1], values[0], rtol=1e-12)
