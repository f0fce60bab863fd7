# ruff: noqa: E501  (the embedded programs and the port steps run past 100 columns)
"""Programs written here in the style of two research repositories, each run under torch and,
ported, under retrograd from the same weights and draws (the harness: ``tests/real_ports.py``;
continued from ``tests/test_real_ports_66.py``):

- TransE in the style of mklimasz/TransE-PyTorch, small, on triples read from text files:
  ``nn.Embedding(..., padding_idx=...)`` tables filled by ``weight.data.uniform_`` and
  renormalised in place by ``weight.data[:-1, :].div_(weight.data[:-1, :].norm(p=1, dim=1,
  keepdim=True))``, ``nn.MarginRankingLoss(margin=..., reduction='none')`` against
  ``torch.tensor([-1], dtype=torch.long)``, corrupted triples from ``torch.randint(high=2,
  size=...)`` and ``torch.where``, ``loss.data.cpu().nonzero().size()[0]``,
  ``torch.arange(end=n).unsqueeze(0).repeat``, ``topk(k=k, largest=False)``, ``argsort()`` and
  ``(order == truth).nonzero()[:, 1].float().add(1.0)``.
- QMIX in the style of oxwhirl/pymarl (the mixer, the recurrent agent, the shared controller
  and the Q-learner), small, under ``import torch as th``: ``self.inp.weight.new(1,
  n).zero_()`` as the initial state, ``nn.GRUCell``, ``th.eye(n).unsqueeze(0).expand(b, -1,
  -1)``, hypernetworks' weights through ``th.abs`` and ``th.bmm``, ``F.elu``,
  ``th.gather(..., dim=3, index=actions)``, ``target_qs[avail[:, 1:] == 0] = -9999999`` (a
  boolean mask over four dimensions), the double-Q ``max(dim=3, keepdim=True)[1]``,
  ``mask[:, 1:] = mask[:, 1:] * (1 - terminated[:, :-1])``, ``mask.expand_as``,
  ``RMSprop(params=..., alpha=..., eps=...)`` over a list of both modules' parameters,
  ``clip_grad_norm_``, ``copy.deepcopy`` targets refreshed by ``load_state_dict``.

One regression is guarded on its own: ``torch.arange(end=n)`` (the start keyword left out).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    port,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)


class SharedRandint:
    """``torch.randint`` of a library drawing from one seeded stream, called as TransE's
    ``main.py`` calls it (``torch.randint(high=2, size=..., device=...)``)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def randint(low=0, high=None, size=None, device=None, **_):
            if high is None:
                low, high = 0, low
            return lib.tensor(rng.integers(low, high, tuple(size)), dtype=lib.int64)

        self.saved = lib.randint
        lib.randint = randint
        return self

    def __exit__(self, *exc):
        self.lib.randint = self.saved
        return False


TRANSE_SOURCE = """
import collections

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils import data as tud


def read_triples(path):
    with open(path) as f:
        return [line.rstrip("\\n").split("\\t") for line in f]


def index_vocab(path):
    # ids by frequency, the most frequent first (ties in first-seen order)
    entities, relations = collections.Counter(), collections.Counter()
    for h, r, t in read_triples(path):
        entities.update([h, t])
        relations.update([r])
    entity_ids = {name: i for i, (name, _) in enumerate(entities.most_common())}
    relation_ids = {name: i for i, (name, _) in enumerate(relations.most_common())}
    return entity_ids, relation_ids


class Triples(tud.Dataset):
    def __init__(self, path, entity_ids, relation_ids):
        self.rows = read_triples(path)
        self.entity_ids, self.relation_ids = entity_ids, relation_ids

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        h, r, t = self.rows[i]
        ents, rels = self.entity_ids, self.relation_ids
        # a name never seen in training maps to the extra (padding) row
        return ents.get(h, len(ents)), rels.get(r, len(rels)), ents.get(t, len(ents))


class TransE(nn.Module):
    # a true triple should have h + r close to t: its score is the p-norm of h + r - t
    def __init__(self, n_entities, n_relations, dim=100, p=1, margin=1.0, device=None):
        super().__init__()
        self.p, self.device = p, device
        bound = 6 / np.sqrt(dim)
        self.ent = nn.Embedding(n_entities + 1, dim, padding_idx=n_entities)
        self.ent.weight.data.uniform_(-bound, bound)
        self.rel = nn.Embedding(n_relations + 1, dim, padding_idx=n_relations)
        self.rel.weight.data.uniform_(-bound, bound)
        # every relation but the padding row (whose norm may be 0) to unit L1 norm
        self.rel.weight.data[:-1, :].div_(self.rel.weight.data[:-1, :].norm(p=1, dim=1, keepdim=True))
        self.ranking = nn.MarginRankingLoss(margin=margin, reduction='none')

    def score(self, triples):
        h, r, t = triples[:, 0], triples[:, 1], triples[:, 2]
        return (self.ent(h) + self.rel(r) - self.ent(t)).norm(p=self.p, dim=1)

    def forward(self, positive, negative):
        # the entities back onto the unit sphere before each step
        self.ent.weight.data[:-1, :].div_(self.ent.weight.data[:-1, :].norm(p=2, dim=1, keepdim=True))
        pos, neg = self.score(positive), self.score(negative)
        # target -1: the positive distance should be the smaller one, by the margin
        wanted = torch.tensor([-1], dtype=torch.long, device=self.device)
        return self.ranking(pos, neg, wanted), pos, neg


def hits(scores, truth, k):
    _, best = scores.topk(k=k, largest=False)
    return torch.where(best == truth, torch.tensor([1]), torch.tensor([0])).sum().item()


def reciprocal_ranks(scores, truth):
    order = scores.argsort()
    return (1.0 / (order == truth).nonzero()[:, 1].float().add(1.0)).sum().item()


def evaluate(model, loader, n_entities, device):
    # rank the true tail among all tails, and the true head among all heads
    sums, count = [0.0, 0.0, 0.0, 0.0], 0.0
    candidates = torch.arange(end=n_entities, device=device).unsqueeze(0)
    for h, r, t in loader:
        b = h.size()[0]
        every = candidates.repeat(b, 1)
        hs, rs, ts = (x.reshape(-1, 1).repeat(1, every.size()[1]) for x in (h, r, t))
        tail_scores = model.score(torch.stack((hs, rs, every), dim=2).reshape(-1, 3)).reshape(b, -1)
        head_scores = model.score(torch.stack((every, rs, ts), dim=2).reshape(-1, 3)).reshape(b, -1)
        scores = torch.cat((tail_scores, head_scores), dim=0)
        truth = torch.cat((t.reshape(-1, 1), h.reshape(-1, 1)))
        for i, k in enumerate((1, 3, 10)):
            sums[i] += hits(scores, truth, k)
        sums[3] += reciprocal_ranks(scores, truth)
        count += scores.size()[0]
    summary = [s / count * 100 for s in sums]
    record.append(summary)
    return summary


def main(train_path, valid_path, batch_size=4, dim=8, margin=1.0, p=1, lr=0.01, epochs=2):
    device = torch.device('cpu')
    entity_ids, relation_ids = index_vocab(train_path)
    train_loader = tud.DataLoader(Triples(train_path, entity_ids, relation_ids), batch_size=batch_size)
    valid_loader = tud.DataLoader(Triples(valid_path, entity_ids, relation_ids), batch_size=batch_size)
    model = TransE(len(entity_ids), len(relation_ids), dim=dim, p=p, margin=margin, device=device)
    initialize(model)
    optimizer = optim.SGD(model.parameters(), lr=lr)
    for epoch in range(1, epochs + 1):
        model.train()
        active, seen = 0, 0
        for h, r, t in train_loader:
            h, r, t = h.to(device), r.to(device), t.to(device)
            positive = torch.stack((h, r, t), dim=1)
            # corrupt each triple's head (coin 1) or tail (coin 0) with a random entity
            coin = torch.randint(high=2, size=h.size(), device=device)
            other = torch.randint(high=len(entity_ids), size=h.size(), device=device)
            corrupt_h, corrupt_t = torch.where(coin == 1, other, h), torch.where(coin == 0, other, t)
            negative = torch.stack((corrupt_h, r, corrupt_t), dim=1)
            optimizer.zero_grad()
            loss, pos, neg = model(positive, negative)
            loss.mean().backward()
            optimizer.step()
            record.append([x.data.cpu().numpy() for x in (loss.mean(), pos.sum(), neg.sum())])
            active += loss.data.cpu().nonzero().size()[0]
            seen += loss.size()[0]
        print("epoch %d: %d of %d triples inside the margin" % (epoch, active, seen))
        model.eval()
        print("hits@10 %.2f" % evaluate(model, valid_loader, len(entity_ids), device)[2])
    record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
"""

TRANSE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\nfrom torch.utils import data as tud\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\nfrom retrograd.utils import data as tud\n",
    ),
    ("            loss.mean().backward()\n", "            grads = loss.mean().backward()\n"),
    ("            optimizer.step()\n", "            optimizer.step(grads)\n"),
]


def _write_triples(path, triples):
    path.write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in triples))
    return str(path)


def test_transe_trains_as_torch(capsys, tmp_path):
    rng = np.random.default_rng(6701)
    entities = [f"/m/{i:02d}" for i in range(12)]
    relations = ["/r/a", "/r/b", "/r/c"]
    # every entity appears (hits@10 needs ten candidates)
    heads = np.concatenate([np.arange(12), rng.integers(0, 12, 4)])
    triples = [
        (entities[h], relations[r], entities[t])
        for h, r, t in zip(heads, rng.integers(0, 3, 16), rng.integers(0, 12, 16))
    ]
    train_path = _write_triples(tmp_path / "train.txt", triples)
    # one unseen entity: the dataset maps it to the padding row
    validation_path = _write_triples(
        tmp_path / "valid.txt", triples[:5] + [(entities[0], relations[1], "/m/unseen")]
    )
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = TRANSE_SOURCE if lib is torch else port(TRANSE_SOURCE, TRANSE_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        with SharedRandint(lib, 6701):
            names["main"](train_path, validation_path)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "triples inside the margin" in logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


QMIX_SOURCE = """
import copy

import numpy as np
import torch as th
import torch.nn as nn
from torch.nn import functional as F
from torch import optim


class Mixer(nn.Module):
    # Q_tot, monotonic in each agent's Q: the mixing weights come from hypernetworks of the
    # state, made non-negative by abs
    def __init__(self, cfg):
        super().__init__()
        self.n = cfg.n_agents
        self.state_dim = int(np.prod(cfg.state_shape))
        self.e = cfg.mixing_embed_dim
        hyper = cfg.hypernet_embed
        self.w1 = nn.Sequential(nn.Linear(self.state_dim, hyper), nn.ReLU(), nn.Linear(hyper, self.e * self.n))
        self.b1 = nn.Linear(self.state_dim, self.e)
        self.w2 = nn.Sequential(nn.Linear(self.state_dim, hyper), nn.ReLU(), nn.Linear(hyper, self.e))
        self.value = nn.Sequential(nn.Linear(self.state_dim, self.e), nn.ReLU(), nn.Linear(self.e, 1))

    def forward(self, qs, states):
        b = qs.size(0)
        s = states.reshape(-1, self.state_dim)
        qs = qs.view(-1, 1, self.n)
        w1 = th.abs(self.w1(s)).view(-1, self.n, self.e)
        hidden = F.elu(th.bmm(qs, w1) + self.b1(s).view(-1, 1, self.e))
        w2 = th.abs(self.w2(s)).view(-1, self.e, 1)
        return (th.bmm(hidden, w2) + self.value(s).view(-1, 1, 1)).view(b, -1, 1)


class RecurrentAgent(nn.Module):
    def __init__(self, n_in, cfg):
        super().__init__()
        self.width = cfg.rnn_hidden_dim
        self.inp = nn.Linear(n_in, self.width)
        self.cell = nn.GRUCell(self.width, self.width)
        self.q = nn.Linear(self.width, cfg.n_actions)

    def initial_state(self):
        return self.inp.weight.new(1, self.width).zero_()  # the model's device and dtype

    def forward(self, x, h):
        h = self.cell(F.relu(self.inp(x)), h.reshape(-1, self.width))
        return self.q(h), h


class SharedController:
    # one network for every agent, told apart by a one-hot id among its inputs
    def __init__(self, cfg):
        self.n = cfg.n_agents
        self.agent = RecurrentAgent(cfg.obs_dim + cfg.n_actions + cfg.n_agents, cfg)
        self.h = None

    def reset(self, b):
        self.h = self.agent.initial_state().unsqueeze(0).expand(b, self.n, -1)

    def inputs(self, batch, t):
        b = batch.batch_size
        onehot = batch["actions_onehot"]
        last = th.zeros_like(onehot[:, t]) if t == 0 else onehot[:, t - 1]
        ids = th.eye(self.n, device=batch.device).unsqueeze(0).expand(b, -1, -1)
        return th.cat([x.reshape(b * self.n, -1) for x in (batch["obs"][:, t], last, ids)], dim=1)

    def forward(self, batch, t):
        qs, self.h = self.agent(self.inputs(batch, t), self.h)
        return qs.view(batch.batch_size, self.n, -1)


class Learner:
    def __init__(self, mac, cfg):
        self.cfg, self.mac = cfg, mac
        self.mixer = Mixer(cfg)
        initialize(self.mixer)
        self.params = list(mac.agent.parameters()) + list(self.mixer.parameters())
        self.optimiser = optim.RMSprop(params=self.params, lr=cfg.lr, alpha=cfg.optim_alpha, eps=cfg.optim_eps)
        self.target_mac, self.target_mixer = copy.deepcopy(mac), copy.deepcopy(self.mixer)
        self.last_sync = 0

    def unroll(self, mac, batch):
        mac.reset(batch.batch_size)
        return [mac.forward(batch, t) for t in range(batch.max_seq_length)]

    def train(self, batch, episode):
        cfg = self.cfg
        # every step but the last (whose successor is not in the batch)
        rewards, actions = batch["reward"][:, :-1], batch["actions"][:, :-1]
        terminated, mask = batch["terminated"][:, :-1].float(), batch["filled"][:, :-1].float()
        mask[:, 1:] = mask[:, 1:] * (1 - terminated[:, :-1])  # nothing after an episode's end
        avail = batch["avail_actions"]
        qs = th.stack(self.unroll(self.mac, batch), dim=1)
        taken = th.gather(qs[:, :-1], dim=3, index=actions).squeeze(3)
        target_qs = th.stack(self.unroll(self.target_mac, batch)[1:], dim=1)
        target_qs[avail[:, 1:] == 0] = -9999999
        # double Q: the live network picks the next action, the target network values it
        live = qs.clone().detach()
        live[avail == 0] = -9999999
        picked = live[:, 1:].max(dim=3, keepdim=True)[1]
        next_q = th.gather(target_qs, 3, picked).squeeze(3)
        q_tot = self.mixer(taken, batch["state"][:, :-1])
        targets = rewards + cfg.gamma * (1 - terminated) * self.target_mixer(next_q, batch["state"][:, 1:])
        mask = mask.expand_as(q_tot)
        td = (q_tot - targets.detach()) * mask
        loss = (td ** 2).sum() / mask.sum()
        self.optimiser.zero_grad()
        loss.backward()
        norm = th.nn.utils.clip_grad_norm_(self.params, cfg.grad_norm_clip)
        self.optimiser.step()
        if (episode - self.last_sync) / cfg.target_update_interval >= 1.0:
            for target, live in ((self.target_mac.agent, self.mac.agent), (self.target_mixer, self.mixer)):
                target.load_state_dict(live.state_dict())
            self.last_sync = episode
            print("targets synced")
        n = mask.sum().item()
        per_agent = n * cfg.n_agents
        record.append([loss.item(), float(norm), td.abs().sum().item() / n,
                       (q_tot * mask).sum().item() / per_agent, (targets * mask).sum().item() / per_agent])


class Episodes:
    # the fields a pymarl-style episode batch hands the learner, as tensors
    def __init__(self, fields):
        self.data = {key: th.tensor(value) for key, value in fields.items()}
        self.batch_size, self.max_seq_length = fields["obs"].shape[:2]
        self.device = "cpu"

    def __getitem__(self, key):
        return self.data[key]


def main(cfg, episodes):
    mac = SharedController(cfg)
    initialize(mac.agent)
    learner = Learner(mac, cfg)
    for number, fields in enumerate(episodes, start=1):
        learner.train(Episodes(fields), number)
    for module in (learner.mixer, mac.agent):
        record.append({name: t.detach().numpy().copy() for name, t in module.state_dict().items()})
"""

QMIX_STEPS = [
    (
        "import torch as th\nimport torch.nn as nn\nfrom torch.nn import functional as F\nfrom torch import optim\n",
        "import retrograd as th\nimport retrograd.nn as nn\nfrom retrograd.nn import functional as F\nfrom retrograd import optim\n",
    ),
    (
        "        loss.backward()\n        norm = th.nn.utils.clip_grad_norm_(self.params, cfg.grad_norm_clip)\n        self.optimiser.step()\n",
        "        grads = loss.backward()\n        norm = th.nn.utils.clip_grad_norm_(grads, self.params, cfg.grad_norm_clip)\n        self.optimiser.step(grads)\n",
    ),
]


class _QMixArgs:
    n_agents = 3
    n_actions = 4
    obs_dim = 5
    state_shape = (6,)
    mixing_embed_dim = 8
    hypernet_embed = 8
    rnn_hidden_dim = 8
    lr = 0.005
    optim_alpha = 0.99
    optim_eps = 0.00001
    gamma = 0.99
    grad_norm_clip = 10
    target_update_interval = 2


def _qmix_episodes(rng, count, batch, steps, args):
    episodes = []
    for _ in range(count):
        avail = (rng.uniform(size=(batch, steps, args.n_agents, args.n_actions)) < 0.7).astype(
            np.int64
        )
        avail[..., 0] = 1  # no-op always available
        actions = np.stack(
            [
                [[rng.choice(np.flatnonzero(a)) for a in agents] for agents in times]
                for times in avail
            ]
        )[..., None]
        terminated = np.zeros((batch, steps, 1), np.int64)
        terminated[0, steps - 2, 0] = 1
        filled = np.ones((batch, steps, 1), np.int64)
        filled[0, steps - 1, 0] = 0
        episodes.append(
            {
                "obs": rng.standard_normal((batch, steps, args.n_agents, args.obs_dim)).astype(
                    np.float32
                ),
                "state": rng.standard_normal((batch, steps, 6)).astype(np.float32),
                "actions": actions,
                "actions_onehot": np.eye(args.n_actions, dtype=np.float32)[actions[..., 0]],
                "avail_actions": avail,
                "reward": rng.standard_normal((batch, steps, 1)).astype(np.float32),
                "terminated": terminated,
                "filled": filled,
            }
        )
    return episodes


def test_qmix_trains_as_torch(capsys):
    args = _QMixArgs()
    episodes = _qmix_episodes(np.random.default_rng(6702), 3, 2, 4, args)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = QMIX_SOURCE if lib is torch else port(QMIX_SOURCE, QMIX_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        names["main"](args, episodes)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert logs[0].count("targets synced") == 1
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


def test_arange_takes_end_as_a_keyword():
    """TransE's ``torch.arange(end=entities_count)``: the start defaults to 0, as in torch (it
    was a required argument)."""
    assert rg.arange(end=4).tolist() == torch.arange(end=4).tolist()
    assert rg.arange(end=4).dtype == rg.int64
    assert rg.arange(start=2, end=5).tolist() == torch.arange(start=2, end=5).tolist()
    with pytest.raises(rg.DTypeError, match="arange"):
        rg.arange()
