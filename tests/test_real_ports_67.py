# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_66.py`` (the
harness: ``tests/real_ports.py``):

- TransE as mklimasz/TransE-PyTorch writes it (``model.py``'s ``TransE``, ``data.py``'s
  ``FB15KDataset`` and ``create_mappings``, ``metric.py``'s ``hit_at_k`` and ``mrr``,
  ``main.py``'s training loop and ``test``), small: ``nn.Embedding(..., padding_idx=...)``
  tables filled by ``weight.data.uniform_`` and renormalised in place by
  ``weight.data[:-1, :].div_(weight.data[:-1, :].norm(p=1, dim=1, keepdim=True))``,
  ``nn.MarginRankingLoss(margin=..., reduction='none')`` against ``torch.tensor([-1],
  dtype=torch.long)``, corrupted triples from ``torch.randint(high=2, size=...)`` and
  ``torch.where``, ``loss.nonzero().size()[0]``, ``torch.arange(end=n).unsqueeze(0).repeat``,
  ``topk(k=k, largest=False)``, ``argsort()`` and ``(indices == ground_truth).nonzero()[:, 1]
  .float().add(1.0)``.
- QMIX as oxwhirl/pymarl writes it (``modules/mixers/qmix.py``'s ``QMixer``,
  ``modules/agents/rnn_agent.py``'s ``RNNAgent``, ``controllers/basic_controller.py``'s
  ``_build_inputs``/``init_hidden``, ``learners/q_learner.py``'s ``train``), small, under
  ``import torch as th``: ``self.fc1.weight.new(1, n).zero_()`` as the hidden state,
  ``nn.GRUCell``, ``th.eye(n).unsqueeze(0).expand(bs, -1, -1)``, hypernetworks' weights
  through ``th.abs`` and ``th.bmm``, ``F.elu``, ``th.gather(..., dim=3, index=actions)``,
  ``target_mac_out[avail_actions[:, 1:] == 0] = -9999999`` (a boolean mask over four
  dimensions), the double-Q ``max(dim=3, keepdim=True)[1]``, ``mask[:, 1:] = mask[:, 1:] * (1 -
  terminated[:, :-1])``, ``mask.expand_as``, ``RMSprop(params=..., alpha=..., eps=...)`` over a
  list of both modules' parameters, ``clip_grad_norm_`` and targets refreshed by
  ``load_state_dict``.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    """Torch's initial weights (which both runs start from) and the programs' draws from
    fixed seeds."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


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
from collections import Counter
from typing import Mapping, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils import data
from torch.utils import data as torch_data


def create_mappings(dataset_path: str) -> Tuple[Mapping[str, int], Mapping[str, int]]:
    \"\"\"Creates separate mappings to indices for entities and relations.\"\"\"
    # counters to have entities/relations sorted from most frequent
    entity_counter = Counter()
    relation_counter = Counter()
    with open(dataset_path, "r") as f:
        for line in f:
            # -1 to remove newline sign
            head, relation, tail = line[:-1].split("\\t")
            entity_counter.update([head, tail])
            relation_counter.update([relation])
    entity2id = {}
    relation2id = {}
    for idx, (mid, _) in enumerate(entity_counter.most_common()):
        entity2id[mid] = idx
    for idx, (relation, _) in enumerate(relation_counter.most_common()):
        relation2id[relation] = idx
    return entity2id, relation2id


class FB15KDataset(data.Dataset):
    \"\"\"Dataset implementation for handling FB15K and FB15K-237.\"\"\"

    def __init__(self, data_path: str, entity2id: Mapping[str, int], relation2id: Mapping[str, int]):
        self.entity2id = entity2id
        self.relation2id = relation2id
        with open(data_path, "r") as f:
            # data in tuples (head, relation, tail)
            self.data = [line[:-1].split("\\t") for line in f]

    def __len__(self):
        \"\"\"Denotes the total number of samples.\"\"\"
        return len(self.data)

    def __getitem__(self, index):
        \"\"\"Returns (head id, relation id, tail id).\"\"\"
        head, relation, tail = self.data[index]
        head_id = self._to_idx(head, self.entity2id)
        relation_id = self._to_idx(relation, self.relation2id)
        tail_id = self._to_idx(tail, self.entity2id)
        return head_id, relation_id, tail_id

    @staticmethod
    def _to_idx(key: str, mapping: Mapping[str, int]) -> int:
        try:
            return mapping[key]
        except KeyError:
            return len(mapping)


class TransE(nn.Module):

    def __init__(self, entity_count, relation_count, device, norm=1, dim=100, margin=1.0):
        super(TransE, self).__init__()
        self.entity_count = entity_count
        self.relation_count = relation_count
        self.device = device
        self.norm = norm
        self.dim = dim
        self.entities_emb = self._init_enitity_emb()
        self.relations_emb = self._init_relation_emb()
        self.criterion = nn.MarginRankingLoss(margin=margin, reduction='none')

    def _init_enitity_emb(self):
        entities_emb = nn.Embedding(num_embeddings=self.entity_count + 1,
                                    embedding_dim=self.dim,
                                    padding_idx=self.entity_count)
        uniform_range = 6 / np.sqrt(self.dim)
        entities_emb.weight.data.uniform_(-uniform_range, uniform_range)
        return entities_emb

    def _init_relation_emb(self):
        relations_emb = nn.Embedding(num_embeddings=self.relation_count + 1,
                                     embedding_dim=self.dim,
                                     padding_idx=self.relation_count)
        uniform_range = 6 / np.sqrt(self.dim)
        relations_emb.weight.data.uniform_(-uniform_range, uniform_range)
        # -1 to avoid nan for OOV vector
        relations_emb.weight.data[:-1, :].div_(relations_emb.weight.data[:-1, :].norm(p=1, dim=1, keepdim=True))
        return relations_emb

    def forward(self, positive_triplets: torch.LongTensor, negative_triplets: torch.LongTensor):
        \"\"\"Return model losses based on the input.\"\"\"
        # -1 to avoid nan for OOV vector
        self.entities_emb.weight.data[:-1, :].div_(self.entities_emb.weight.data[:-1, :].norm(p=2, dim=1, keepdim=True))

        assert positive_triplets.size()[1] == 3
        positive_distances = self._distance(positive_triplets)

        assert negative_triplets.size()[1] == 3
        negative_distances = self._distance(negative_triplets)

        return self.loss(positive_distances, negative_distances), positive_distances, negative_distances

    def predict(self, triplets: torch.LongTensor):
        \"\"\"Calculated dissimilarity score for given triplets.\"\"\"
        return self._distance(triplets)

    def loss(self, positive_distances, negative_distances):
        target = torch.tensor([-1], dtype=torch.long, device=self.device)
        return self.criterion(positive_distances, negative_distances, target)

    def _distance(self, triplets):
        \"\"\"Triplets should have shape Bx3 where dim 3 = head id, relation id, tail id.\"\"\"
        assert triplets.size()[1] == 3
        heads = triplets[:, 0]
        relations = triplets[:, 1]
        tails = triplets[:, 2]
        return (self.entities_emb(heads) + self.relations_emb(relations) - self.entities_emb(tails)).norm(p=self.norm,
                                                                                                          dim=1)


def hit_at_k(predictions: torch.Tensor, ground_truth_idx: torch.Tensor, device: torch.device, k: int = 10) -> int:
    \"\"\"Calculates number of hits@k.\"\"\"
    assert predictions.size(0) == ground_truth_idx.size(0)

    zero_tensor = torch.tensor([0], device=device)
    one_tensor = torch.tensor([1], device=device)
    _, indices = predictions.topk(k=k, largest=False)
    return torch.where(indices == ground_truth_idx, one_tensor, zero_tensor).sum().item()


def mrr(predictions: torch.Tensor, ground_truth_idx: torch.Tensor) -> float:
    \"\"\"Calculates mean reciprocal rank (MRR) for given predictions and ground truth values.\"\"\"
    indices = predictions.argsort()
    return (1.0 / (indices == ground_truth_idx).nonzero()[:, 1].float().add(1.0)).sum().item()


def test(model: torch.nn.Module, data_generator: torch_data.DataLoader, entities_count: int,
         device: torch.device, epoch_id: int, metric_suffix: str,
         ) -> Tuple[float, float, float, float]:
    examples_count = 0.0
    hits_at_1 = 0.0
    hits_at_3 = 0.0
    hits_at_10 = 0.0
    mrr_sum = 0.0

    entity_ids = torch.arange(end=entities_count, device=device).unsqueeze(0)
    for head, relation, tail in data_generator:
        current_batch_size = head.size()[0]

        head, relation, tail = head.to(device), relation.to(device), tail.to(device)
        all_entities = entity_ids.repeat(current_batch_size, 1)
        heads = head.reshape(-1, 1).repeat(1, all_entities.size()[1])
        relations = relation.reshape(-1, 1).repeat(1, all_entities.size()[1])
        tails = tail.reshape(-1, 1).repeat(1, all_entities.size()[1])

        # Check all possible tails
        triplets = torch.stack((heads, relations, all_entities), dim=2).reshape(-1, 3)
        tails_predictions = model.predict(triplets).reshape(current_batch_size, -1)
        # Check all possible heads
        triplets = torch.stack((all_entities, relations, tails), dim=2).reshape(-1, 3)
        heads_predictions = model.predict(triplets).reshape(current_batch_size, -1)

        # Concat predictions
        predictions = torch.cat((tails_predictions, heads_predictions), dim=0)
        ground_truth_entity_id = torch.cat((tail.reshape(-1, 1), head.reshape(-1, 1)))

        hits_at_1 += hit_at_k(predictions, ground_truth_entity_id, device=device, k=1)
        hits_at_3 += hit_at_k(predictions, ground_truth_entity_id, device=device, k=3)
        hits_at_10 += hit_at_k(predictions, ground_truth_entity_id, device=device, k=10)
        mrr_sum += mrr(predictions, ground_truth_entity_id)

        examples_count += predictions.size()[0]

    hits_at_1_score = hits_at_1 / examples_count * 100
    hits_at_3_score = hits_at_3 / examples_count * 100
    hits_at_10_score = hits_at_10 / examples_count * 100
    mrr_score = mrr_sum / examples_count * 100
    record.append([hits_at_1_score, hits_at_3_score, hits_at_10_score, mrr_score])
    return hits_at_1_score, hits_at_3_score, hits_at_10_score, mrr_score


def main(train_path, validation_path, batch_size=4, vector_length=8, margin=1.0, norm=1,
         learning_rate=0.01, epochs=2):
    device = torch.device('cpu')
    entity2id, relation2id = create_mappings(train_path)
    train_set = FB15KDataset(train_path, entity2id, relation2id)
    train_generator = torch_data.DataLoader(train_set, batch_size=batch_size)
    validation_set = FB15KDataset(validation_path, entity2id, relation2id)
    validation_generator = torch_data.DataLoader(validation_set, batch_size=batch_size)

    model = TransE(entity_count=len(entity2id), relation_count=len(relation2id), dim=vector_length,
                   margin=margin, device=device, norm=norm)  # type: torch.nn.Module
    initialize(model)
    model = model.to(device)
    optimizer = optim.SGD(model.parameters(), lr=learning_rate)
    step = 0

    for epoch_id in range(1, epochs + 1):
        print("Starting epoch: ", epoch_id)
        loss_impacting_samples_count = 0
        samples_count = 0
        model.train()

        for local_heads, local_relations, local_tails in train_generator:
            local_heads, local_relations, local_tails = (local_heads.to(device), local_relations.to(device),
                                                         local_tails.to(device))

            positive_triples = torch.stack((local_heads, local_relations, local_tails), dim=1)

            # Preparing negatives.
            # Generate binary tensor to replace either head or tail. 1 means replace head, 0 means replace tail.
            head_or_tail = torch.randint(high=2, size=local_heads.size(), device=device)
            random_entities = torch.randint(high=len(entity2id), size=local_heads.size(), device=device)
            broken_heads = torch.where(head_or_tail == 1, random_entities, local_heads)
            broken_tails = torch.where(head_or_tail == 0, random_entities, local_tails)
            negative_triples = torch.stack((broken_heads, local_relations, broken_tails), dim=1)

            optimizer.zero_grad()

            loss, pd, nd = model(positive_triples, negative_triples)
            loss.mean().backward()

            record.append([loss.mean().data.cpu().numpy(), pd.sum().data.cpu().numpy(), nd.sum().data.cpu().numpy()])

            loss = loss.data.cpu()
            loss_impacting_samples_count += loss.nonzero().size()[0]
            samples_count += loss.size()[0]

            optimizer.step()
            step += 1

        print("Loss impacting samples: %d of %d" % (loss_impacting_samples_count, samples_count))
        model.eval()
        _, _, hits_at_10, _ = test(model=model, data_generator=validation_generator,
                                   entities_count=len(entity2id), device=device,
                                   epoch_id=epoch_id, metric_suffix="val")
        print("hits@10 %.2f" % hits_at_10)
    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
"""

TRANSE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\nfrom torch.utils import data\nfrom torch.utils import data as torch_data\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\nfrom retrograd.utils import data\nfrom retrograd.utils import data as torch_data\n",
    ),
    (
        "            loss.mean().backward()\n",
        "            grads = loss.mean().backward()\n",
    ),
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
    # one unseen entity: ``_to_idx`` maps it to the padding row
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
    assert "Loss impacting samples" in logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


QMIX_SOURCE = """
import copy

import numpy as np
import torch as th
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import RMSprop


class QMixer(nn.Module):
    def __init__(self, args):
        super(QMixer, self).__init__()

        self.args = args
        self.n_agents = args.n_agents
        self.state_dim = int(np.prod(args.state_shape))

        self.embed_dim = args.mixing_embed_dim

        if getattr(args, "hypernet_layers", 1) == 1:
            self.hyper_w_1 = nn.Linear(self.state_dim, self.embed_dim * self.n_agents)
            self.hyper_w_final = nn.Linear(self.state_dim, self.embed_dim)
        elif getattr(args, "hypernet_layers", 1) == 2:
            hypernet_embed = self.args.hypernet_embed
            self.hyper_w_1 = nn.Sequential(nn.Linear(self.state_dim, hypernet_embed),
                                           nn.ReLU(),
                                           nn.Linear(hypernet_embed, self.embed_dim * self.n_agents))
            self.hyper_w_final = nn.Sequential(nn.Linear(self.state_dim, hypernet_embed),
                                           nn.ReLU(),
                                           nn.Linear(hypernet_embed, self.embed_dim))
        elif getattr(args, "hypernet_layers", 1) > 2:
            raise Exception("Sorry >2 hypernet layers is not implemented!")
        else:
            raise Exception("Error setting number of hypernet layers.")

        # State dependent bias for hidden layer
        self.hyper_b_1 = nn.Linear(self.state_dim, self.embed_dim)

        # V(s) instead of a bias for the last layers
        self.V = nn.Sequential(nn.Linear(self.state_dim, self.embed_dim),
                               nn.ReLU(),
                               nn.Linear(self.embed_dim, 1))

    def forward(self, agent_qs, states):
        bs = agent_qs.size(0)
        states = states.reshape(-1, self.state_dim)
        agent_qs = agent_qs.view(-1, 1, self.n_agents)
        # First layer
        w1 = th.abs(self.hyper_w_1(states))
        b1 = self.hyper_b_1(states)
        w1 = w1.view(-1, self.n_agents, self.embed_dim)
        b1 = b1.view(-1, 1, self.embed_dim)
        hidden = F.elu(th.bmm(agent_qs, w1) + b1)
        # Second layer
        w_final = th.abs(self.hyper_w_final(states))
        w_final = w_final.view(-1, self.embed_dim, 1)
        # State-dependent bias
        v = self.V(states).view(-1, 1, 1)
        # Compute final output
        y = th.bmm(hidden, w_final) + v
        # Reshape and return
        q_tot = y.view(bs, -1, 1)
        return q_tot


class RNNAgent(nn.Module):
    def __init__(self, input_shape, args):
        super(RNNAgent, self).__init__()
        self.args = args

        self.fc1 = nn.Linear(input_shape, args.rnn_hidden_dim)
        self.rnn = nn.GRUCell(args.rnn_hidden_dim, args.rnn_hidden_dim)
        self.fc2 = nn.Linear(args.rnn_hidden_dim, args.n_actions)

    def init_hidden(self):
        # make hidden states on same device as model
        return self.fc1.weight.new(1, self.args.rnn_hidden_dim).zero_()

    def forward(self, inputs, hidden_state):
        x = F.relu(self.fc1(inputs))
        h_in = hidden_state.reshape(-1, self.args.rnn_hidden_dim)
        h = self.rnn(x, h_in)
        q = self.fc2(h)
        return q, h


# This multi-agent controller shares parameters between agents
class BasicMAC:
    def __init__(self, scheme, groups, args):
        self.n_agents = args.n_agents
        self.args = args
        input_shape = self._get_input_shape(scheme)
        self._build_agents(input_shape)
        self.agent_output_type = args.agent_output_type

        self.hidden_states = None

    def forward(self, ep_batch, t, test_mode=False):
        agent_inputs = self._build_inputs(ep_batch, t)
        avail_actions = ep_batch["avail_actions"][:, t]
        agent_outs, self.hidden_states = self.agent(agent_inputs, self.hidden_states)
        return agent_outs.view(ep_batch.batch_size, self.n_agents, -1)

    def init_hidden(self, batch_size):
        self.hidden_states = self.agent.init_hidden().unsqueeze(0).expand(batch_size, self.n_agents, -1)  # bav

    def parameters(self):
        return self.agent.parameters()

    def load_state(self, other_mac):
        self.agent.load_state_dict(other_mac.agent.state_dict())

    def _build_agents(self, input_shape):
        self.agent = RNNAgent(input_shape, self.args)

    def _build_inputs(self, batch, t):
        # Assumes homogenous agents with flat observations.
        # Other MACs might want to e.g. delegate building inputs to each agent
        bs = batch.batch_size
        inputs = []
        inputs.append(batch["obs"][:, t])  # b1av
        if self.args.obs_last_action:
            if t == 0:
                inputs.append(th.zeros_like(batch["actions_onehot"][:, t]))
            else:
                inputs.append(batch["actions_onehot"][:, t-1])
        if self.args.obs_agent_id:
            inputs.append(th.eye(self.n_agents, device=batch.device).unsqueeze(0).expand(bs, -1, -1))

        inputs = th.cat([x.reshape(bs*self.n_agents, -1) for x in inputs], dim=1)
        return inputs

    def _get_input_shape(self, scheme):
        input_shape = scheme["obs"]["vshape"]
        if self.args.obs_last_action:
            input_shape += scheme["actions_onehot"]["vshape"][0]
        if self.args.obs_agent_id:
            input_shape += self.n_agents

        return input_shape


class QLearner:
    def __init__(self, mac, scheme, logger, args):
        self.args = args
        self.mac = mac
        self.logger = logger

        self.params = list(mac.parameters())

        self.last_target_update_episode = 0

        self.mixer = None
        if args.mixer is not None:
            if args.mixer == "qmix":
                self.mixer = QMixer(args)
            else:
                raise ValueError("Mixer {} not recognised.".format(args.mixer))
            initialize(self.mixer)
            self.params += list(self.mixer.parameters())
            self.target_mixer = copy.deepcopy(self.mixer)

        self.optimiser = RMSprop(params=self.params, lr=args.lr, alpha=args.optim_alpha, eps=args.optim_eps)

        # a little wasteful to deepcopy (e.g. duplicates action selector), but should work for any MAC
        self.target_mac = copy.deepcopy(mac)

        self.log_stats_t = -self.args.learner_log_interval - 1

    def train(self, batch, t_env: int, episode_num: int):
        # Get the relevant quantities
        rewards = batch["reward"][:, :-1]
        actions = batch["actions"][:, :-1]
        terminated = batch["terminated"][:, :-1].float()
        mask = batch["filled"][:, :-1].float()
        mask[:, 1:] = mask[:, 1:] * (1 - terminated[:, :-1])
        avail_actions = batch["avail_actions"]

        # Calculate estimated Q-Values
        mac_out = []
        self.mac.init_hidden(batch.batch_size)
        for t in range(batch.max_seq_length):
            agent_outs = self.mac.forward(batch, t=t)
            mac_out.append(agent_outs)
        mac_out = th.stack(mac_out, dim=1)  # Concat over time

        # Pick the Q-Values for the actions taken by each agent
        chosen_action_qvals = th.gather(mac_out[:, :-1], dim=3, index=actions).squeeze(3)  # Remove the last dim

        # Calculate the Q-Values necessary for the target
        target_mac_out = []
        self.target_mac.init_hidden(batch.batch_size)
        for t in range(batch.max_seq_length):
            target_agent_outs = self.target_mac.forward(batch, t=t)
            target_mac_out.append(target_agent_outs)

        # We don't need the first timesteps Q-Value estimate for calculating targets
        target_mac_out = th.stack(target_mac_out[1:], dim=1)  # Concat across time

        # Mask out unavailable actions
        target_mac_out[avail_actions[:, 1:] == 0] = -9999999

        # Max over target Q-Values
        if self.args.double_q:
            # Get actions that maximise live Q (for double q-learning)
            mac_out_detach = mac_out.clone().detach()
            mac_out_detach[avail_actions == 0] = -9999999
            cur_max_actions = mac_out_detach[:, 1:].max(dim=3, keepdim=True)[1]
            target_max_qvals = th.gather(target_mac_out, 3, cur_max_actions).squeeze(3)
        else:
            target_max_qvals = target_mac_out.max(dim=3)[0]

        # Mix
        if self.mixer is not None:
            chosen_action_qvals = self.mixer(chosen_action_qvals, batch["state"][:, :-1])
            target_max_qvals = self.target_mixer(target_max_qvals, batch["state"][:, 1:])

        # Calculate 1-step Q-Learning targets
        targets = rewards + self.args.gamma * (1 - terminated) * target_max_qvals

        # Td-error
        td_error = (chosen_action_qvals - targets.detach())

        mask = mask.expand_as(td_error)

        # 0-out the targets that came from padded data
        masked_td_error = td_error * mask

        # Normal L2 loss, take mean over actual data
        loss = (masked_td_error ** 2).sum() / mask.sum()

        # Optimise
        self.optimiser.zero_grad()
        loss.backward()
        grad_norm = th.nn.utils.clip_grad_norm_(self.params, self.args.grad_norm_clip)
        self.optimiser.step()

        if (episode_num - self.last_target_update_episode) / self.args.target_update_interval >= 1.0:
            self._update_targets()
            self.last_target_update_episode = episode_num

        mask_elems = mask.sum().item()
        record.append([loss.item(), float(grad_norm), (masked_td_error.abs().sum().item()/mask_elems),
                       (chosen_action_qvals * mask).sum().item()/(mask_elems * self.args.n_agents),
                       (targets * mask).sum().item()/(mask_elems * self.args.n_agents)])

    def _update_targets(self):
        self.target_mac.load_state(self.mac)
        if self.mixer is not None:
            self.target_mixer.load_state_dict(self.mixer.state_dict())
        print("Updated target network")


class EpisodeBatch:
    \"\"\"The fields pymarl's ``EpisodeBatch`` hands the learner, as tensors.\"\"\"

    def __init__(self, fields, batch_size, max_seq_length, device="cpu"):
        self.data = {k: th.tensor(v) for k, v in fields.items()}
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.device = device

    def __getitem__(self, item):
        return self.data[item]


def main(args, episodes):
    scheme = {"obs": {"vshape": args.obs_dim}, "actions_onehot": {"vshape": (args.n_actions,)}}
    mac = BasicMAC(scheme, None, args)
    initialize(mac.agent)
    learner = QLearner(mac, scheme, None, args)
    for episode_num, fields in enumerate(episodes):
        batch = EpisodeBatch(fields, batch_size=fields["obs"].shape[0], max_seq_length=fields["obs"].shape[1])
        learner.train(batch, t_env=episode_num, episode_num=episode_num + 1)
    record.append({k: v.detach().numpy().copy() for k, v in learner.mixer.state_dict().items()})
    record.append({k: v.detach().numpy().copy() for k, v in mac.agent.state_dict().items()})
"""

QMIX_STEPS = [
    (
        "import torch as th\nimport torch.nn as nn\nimport torch.nn.functional as F\nfrom torch.optim import RMSprop\n",
        "import retrograd as th\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nfrom retrograd.optim import RMSprop\n",
    ),
    (
        "        loss.backward()\n        grad_norm = th.nn.utils.clip_grad_norm_(self.params, self.args.grad_norm_clip)\n        self.optimiser.step()\n",
        "        grads = loss.backward()\n        grad_norm = th.nn.utils.clip_grad_norm_(grads, self.params, self.args.grad_norm_clip)\n        self.optimiser.step(grads)\n",
    ),
]


class _QMixArgs:
    n_agents = 3
    n_actions = 4
    obs_dim = 5
    state_shape = (6,)
    mixing_embed_dim = 8
    hypernet_layers = 2
    hypernet_embed = 8
    rnn_hidden_dim = 8
    agent_output_type = "q"
    obs_last_action = True
    obs_agent_id = True
    mixer = "qmix"
    lr = 0.005
    optim_alpha = 0.99
    optim_eps = 0.00001
    gamma = 0.99
    grad_norm_clip = 10
    target_update_interval = 2
    learner_log_interval = 100
    double_q = True


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
    assert logs[0].count("Updated target network") == 1
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


def test_arange_takes_end_as_a_keyword():
    """TransE's ``torch.arange(end=entities_count)``: the start defaults to 0, as in torch (it
    was a required argument)."""
    assert rg.arange(end=4).tolist() == torch.arange(end=4).tolist()
    assert rg.arange(end=4).dtype == rg.int64
    assert rg.arange(start=2, end=5).tolist() == torch.arange(start=2, end=5).tolist()
    with pytest.raises(rg.DTypeError, match="arange"):
        rg.arange()
