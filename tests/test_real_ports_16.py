# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- the text classification tutorial (pytorch/tutorials ``beginner_source/
  text_sentiment_ngrams_tutorial.py``) with a plain vocabulary for torchtext's: an
  ``nn.EmbeddingBag(vocab_size, embed_dim, sparse=False)`` fed one flat index tensor and
  ``offsets`` made by ``torch.tensor(offsets[:-1]).cumsum(dim=0)`` in a ``collate_batch``,
  ``weight.data.uniform_(-initrange, initrange)``, ``bias.data.zero_()``, SGD at ``lr=5`` with
  ``clip_grad_norm_(model.parameters(), 0.1)``, ``StepLR(optimizer, 1.0, gamma=0.1)`` (a float
  step size) stepped only when the validation accuracy drops, ``random_split`` and
  ``DataLoader(shuffle=True)``, and ``predict`` with ``torch.tensor([0])`` offsets;
- the Set Transformer (github.com/juho-lee/set_transformer ``modules.py``, ``models.py`` and
  the max-regression demo): heads split by ``torch.cat(Q.split(dim_split, 2), 0)`` and joined
  by ``torch.cat((Q_ + A.bmm(V_)).split(Q.size(0), 0), 2)``, ``torch.softmax(...,
  2)``, optional ``LayerNorm``s looked up by ``getattr(self, 'ln0', None)``, inducing points and
  seeds as ``nn.Parameter(torch.Tensor(1, n, dim))`` with ``xavier_uniform_`` and
  ``.repeat(X.size(0), 1, 1)``, ``nn.L1Loss`` on sets of random length from
  ``np.random.randint``, and ``optim`` shadowed by the local optimizer;
- prototypical networks (github.com/jakesnell/prototypical-networks ``protonets/models/
  few_shot.py``, ``utils``): ``euclidean_dist`` by ``unsqueeze(...).expand`` and
  ``torch.pow(x - y, 2).sum(2)``, targets by ``torch.arange(0, n_class).view(n_class, 1,
  1).expand(n_class, n_query, 1).long()`` in a ``Variable(..., requires_grad=False)``, support
  and query stacked by ``xs.view(n_class * n_support, *xs.size()[2:])``, prototypes by
  ``view(...).mean(1)``, ``log_p_y.gather(2, target_inds).squeeze().view(-1).mean()``,
  ``log_p_y.max(2)``, the encoder called as ``self.encoder.forward(x)``, the optimizer picked
  by ``getattr(optim, name)`` and ``lr_scheduler.StepLR``.

All three ran unchanged but for the gradient lines (and ``import torch.optim.lr_scheduler as
lr_scheduler``, an import line). A sweep of everyday idioms beside them found two defects:
``x.flatten(start_dim=1)`` was refused (the method took only ``start``/``end``), and
``t == None`` raised where torch answers ``False``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both
from test_real_ports_13 import SharedDraws


def _run(monkeypatch, source, step, seed, build, go, patches=()):
    """``go(names, lib, models)`` in torch and in the port with shared draws; the port's
    modules (``build(names)``, a tuple) loaded with torch's initial states."""
    records, initial = [], None
    for lib in (torch, rg):
        with monkeypatch.context() as patch:
            SharedDraws(seed).patch(patch, lib)
            for extra in patches:
                extra.patch(patch, lib)
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
            records.append(go(names, lib, models))
    return records


class SharedSplit:
    """``random_split`` of a library permuting by one seeded stream (torch's by its own
    generator), the same split for both libraries."""

    def __init__(self, seed):
        self.seed = seed

    def patch(self, monkeypatch, lib):
        rng = np.random.default_rng(self.seed)

        def random_split(dataset, lengths, generator=None):
            order = rng.permutation(len(dataset)).tolist()
            out, start = [], 0
            for n in lengths:
                out.append(lib.utils.data.Subset(dataset, order[start : start + n]))
                start += n
            return out

        monkeypatch.setattr(lib.utils.data, "random_split", random_split)


# -- text classification with EmbeddingBag --------------------------------------------------------
TEXT_SOURCE = """
import time
from torch.utils.data import DataLoader
from torch.utils.data import random_split

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

def tokenizer(text):
    return text.lower().replace(",", " ").split()

def build_vocab_from_iterator(iterator, specials):
    words = sorted({w for tokens in iterator for w in tokens})
    itos = specials + words
    stoi = {w: i for i, w in enumerate(itos)}
    vocab = lambda tokens: [stoi.get(t, 0) for t in tokens]
    vocab.size = len(itos)
    return vocab

class TextClassificationModel(nn.Module):

    def __init__(self, vocab_size, embed_dim, num_class):
        super(TextClassificationModel, self).__init__()
        self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, sparse=False)
        self.fc = nn.Linear(embed_dim, num_class)
        self.init_weights()

    def init_weights(self):
        initrange = 0.5
        self.embedding.weight.data.uniform_(-initrange, initrange)
        self.fc.weight.data.uniform_(-initrange, initrange)
        self.fc.bias.data.zero_()

    def forward(self, text, offsets):
        embedded = self.embedding(text, offsets)
        return self.fc(embedded)

def make(train_iter):
    vocab = build_vocab_from_iterator((tokenizer(text) for _, text in train_iter), specials=["<unk>"])
    text_pipeline = lambda x: vocab(tokenizer(x))
    label_pipeline = lambda x: int(x) - 1

    def collate_batch(batch):
        label_list, text_list, offsets = [], [], [0]
        for _label, _text in batch:
            label_list.append(label_pipeline(_label))
            processed_text = torch.tensor(text_pipeline(_text), dtype=torch.int64)
            text_list.append(processed_text)
            offsets.append(processed_text.size(0))
        label_list = torch.tensor(label_list, dtype=torch.int64)
        offsets = torch.tensor(offsets[:-1]).cumsum(dim=0)
        text_list = torch.cat(text_list)
        return label_list.to(device), text_list.to(device), offsets.to(device)

    return vocab, text_pipeline, collate_batch

def main(model, train_iter, test_iter, text_pipeline, collate_batch):
    records = []

    def train(dataloader):
        model.train()
        total_acc, total_count = 0, 0
        log_interval = 500
        start_time = time.time()

        for idx, (label, text, offsets) in enumerate(dataloader):
            optimizer.zero_grad()
            predicted_label = model(text, offsets)
            loss = criterion(predicted_label, label)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            optimizer.step()
            total_acc += (predicted_label.argmax(1) == label).sum().item()
            total_count += label.size(0)
            records.append(loss.item())
        records.append(total_acc / total_count)

    def evaluate(dataloader):
        model.eval()
        total_acc, total_count = 0, 0

        with torch.no_grad():
            for idx, (label, text, offsets) in enumerate(dataloader):
                predicted_label = model(text, offsets)
                loss = criterion(predicted_label, label)
                total_acc += (predicted_label.argmax(1) == label).sum().item()
                total_count += label.size(0)
        return total_acc / total_count

    # Hyperparameters
    EPOCHS = 4  # epoch
    LR = 5  # learning rate
    BATCH_SIZE = 4  # batch size for training

    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.1)
    total_accu = None
    train_dataset = list(train_iter)
    test_dataset = list(test_iter)
    num_train = int(len(train_dataset) * 0.75)
    split_train_, split_valid_ = random_split(
        train_dataset, [num_train, len(train_dataset) - num_train]
    )

    train_dataloader = DataLoader(
        split_train_, batch_size=BATCH_SIZE, shuffle=True, collate_fn=collate_batch
    )
    valid_dataloader = DataLoader(
        split_valid_, batch_size=BATCH_SIZE, shuffle=True, collate_fn=collate_batch
    )
    test_dataloader = DataLoader(
        test_dataset, batch_size=BATCH_SIZE, shuffle=True, collate_fn=collate_batch
    )

    for epoch in range(1, EPOCHS + 1):
        epoch_start_time = time.time()
        train(train_dataloader)
        accu_val = evaluate(valid_dataloader)
        if total_accu is not None and total_accu > accu_val:
            scheduler.step()
        else:
            total_accu = accu_val
        records.append([accu_val, optimizer.param_groups[0]["lr"]])
    records.append(evaluate(test_dataloader))

    ag_news_label = {1: "World", 2: "Sports", 3: "Business", 4: "Sci/Tec"}

    def predict(text, text_pipeline):
        with torch.no_grad():
            text = torch.tensor(text_pipeline(text))
            output = model(text, torch.tensor([0]))
            return output.argmax(1).item() + 1

    ex_text_str = "MEMPHIS, Tenn. - Four days ago, Jon Rahm was enduring the season's worst weather conditions on Sunday at The Open"
    records.append(ag_news_label[predict(ex_text_str, text_pipeline)])
    records.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    return records
"""

TEXT_STEP = [
    (
        "            loss.backward()\n            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)\n            optimizer.step()",
        "            grads = loss.backward()\n            torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 0.1)\n            optimizer.step(grads)",
    ),
]

NEWS = [
    ("1", "leaders meet at the summit on trade and peace"),
    ("2", "the team won the open final on sunday"),
    ("3", "shares fall as the bank raises rates"),
    ("4", "new chip doubles the speed of phones"),
    ("1", "peace talks stall as the summit ends"),
    ("2", "star player injured before the final"),
    ("3", "oil prices rise on trade worries"),
    ("4", "scientists find water on a distant planet"),
    ("2", "golf open delayed by the worst weather"),
    ("3", "the bank reports record profits"),
    ("4", "software update fixes the phone bug"),
    ("1", "election results spark protests"),
]


def test_embedding_bag_text_classification_tutorial_matches_torch(monkeypatch):
    train_iter, test_iter = NEWS[:8] + NEWS[10:], NEWS[8:10] + NEWS[:2]

    def build(names):
        vocab, text_pipeline, collate_batch = names["make"](train_iter)
        build.pipeline = (text_pipeline, collate_batch)
        return (names["TextClassificationModel"](vocab.size, 8, 4),)

    def go(names, lib, models):
        return names["main"](models[0], train_iter, test_iter, *build.pipeline)

    records = _run(monkeypatch, TEXT_SOURCE, TEXT_STEP, 40, build, go, patches=(SharedSplit(41),))
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


# -- Set Transformer -------------------------------------------------------------------------------
SET_SOURCE = """
class MAB(nn.Module):
    def __init__(self, dim_Q, dim_K, dim_V, num_heads, ln=False):
        super(MAB, self).__init__()
        self.dim_V = dim_V
        self.num_heads = num_heads
        self.fc_q = nn.Linear(dim_Q, dim_V)
        self.fc_k = nn.Linear(dim_K, dim_V)
        self.fc_v = nn.Linear(dim_K, dim_V)
        if ln:
            self.ln0 = nn.LayerNorm(dim_V)
            self.ln1 = nn.LayerNorm(dim_V)
        self.fc_o = nn.Linear(dim_V, dim_V)

    def forward(self, Q, K):
        Q = self.fc_q(Q)
        K, V = self.fc_k(K), self.fc_v(K)

        dim_split = self.dim_V // self.num_heads
        Q_ = torch.cat(Q.split(dim_split, 2), 0)
        K_ = torch.cat(K.split(dim_split, 2), 0)
        V_ = torch.cat(V.split(dim_split, 2), 0)

        A = torch.softmax(Q_.bmm(K_.transpose(1,2))/math.sqrt(self.dim_V), 2)
        O = torch.cat((Q_ + A.bmm(V_)).split(Q.size(0), 0), 2)
        O = O if getattr(self, 'ln0', None) is None else self.ln0(O)
        O = O + F.relu(self.fc_o(O))
        O = O if getattr(self, 'ln1', None) is None else self.ln1(O)
        return O

class SAB(nn.Module):
    def __init__(self, dim_in, dim_out, num_heads, ln=False):
        super(SAB, self).__init__()
        self.mab = MAB(dim_in, dim_in, dim_out, num_heads, ln=ln)

    def forward(self, X):
        return self.mab(X, X)

class ISAB(nn.Module):
    def __init__(self, dim_in, dim_out, num_heads, num_inds, ln=False):
        super(ISAB, self).__init__()
        self.I = nn.Parameter(torch.Tensor(1, num_inds, dim_out))
        nn.init.xavier_uniform_(self.I)
        self.mab0 = MAB(dim_out, dim_in, dim_out, num_heads, ln=ln)
        self.mab1 = MAB(dim_in, dim_out, dim_out, num_heads, ln=ln)

    def forward(self, X):
        H = self.mab0(self.I.repeat(X.size(0), 1, 1), X)
        return self.mab1(X, H)

class PMA(nn.Module):
    def __init__(self, dim, num_heads, num_seeds, ln=False):
        super(PMA, self).__init__()
        self.S = nn.Parameter(torch.Tensor(1, num_seeds, dim))
        nn.init.xavier_uniform_(self.S)
        self.mab = MAB(dim, dim, dim, num_heads, ln=ln)

    def forward(self, X):
        return self.mab(self.S.repeat(X.size(0), 1, 1), X)

class SetTransformer(nn.Module):
    def __init__(self, dim_input, num_outputs, dim_output,
            num_inds=32, dim_hidden=128, num_heads=4, ln=False):
        super(SetTransformer, self).__init__()
        self.enc = nn.Sequential(
                ISAB(dim_input, dim_hidden, num_heads, num_inds, ln=ln),
                ISAB(dim_hidden, dim_hidden, num_heads, num_inds, ln=ln))
        self.dec = nn.Sequential(
                PMA(dim_hidden, num_heads, num_outputs, ln=ln),
                SAB(dim_hidden, dim_hidden, num_heads, ln=ln),
                SAB(dim_hidden, dim_hidden, num_heads, ln=ln),
                nn.Linear(dim_hidden, dim_output))

    def forward(self, X):
        return self.dec(self.enc(X))

class SmallSetTransformer(nn.Module):
    def __init__(self,):
        super().__init__()
        self.enc = nn.Sequential(
            SAB(dim_in=1, dim_out=16, num_heads=4),
            SAB(dim_in=16, dim_out=16, num_heads=4),
        )
        self.dec = nn.Sequential(
            PMA(dim=16, num_heads=4, num_seeds=1),
            nn.Linear(in_features=16, out_features=1),
        )

    def forward(self, x):
        x = self.enc(x)
        x = self.dec(x)
        return x.squeeze(-1)

def gen_data(batch_size, max_length=10, test=False):
    length = np.random.randint(1, max_length + 1)
    x = np.random.randint(1, 100, (batch_size, length))
    y = np.max(x, axis=1)
    x, y = np.expand_dims(x, axis=2), np.expand_dims(y, axis=1)
    return x, y

def train(model):
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.L1Loss()
    losses = []
    for _ in range(5):
        x, y = gen_data(batch_size=2 ** 4, max_length=10)
        x, y = torch.from_numpy(x).float(), torch.from_numpy(y).float()
        loss = criterion(model(x), y)
        optim.zero_grad()
        loss.backward()
        optim.step()
        losses += [loss.item()]
    return losses

def main(model):
    records = train(model)
    records.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    return records

def main_full(model, X):
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    records = []
    for _ in range(3):
        out = model(X)
        loss = out.square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        records.append(out.detach().numpy().copy())
    return records
"""

SET_STEP = [
    (
        "        optim.zero_grad()\n        loss.backward()\n        optim.step()",
        "        optim.zero_grad()\n        grads = loss.backward()\n        optim.step(grads)",
    ),
    (
        "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()",
        "        optimizer.zero_grad()\n        grads = loss.backward()\n        optimizer.step(grads)",
    ),
]


def test_set_transformer_max_regression_matches_torch(monkeypatch):
    records = _run(
        monkeypatch,
        SET_SOURCE,
        SET_STEP,
        42,
        lambda names: (names["SmallSetTransformer"](),),
        lambda names, lib, models: names["main"](models[0]),
    )
    # a key projection's bias shifts every score of a row alike: its true gradient is 0; and
    # its weight sees only how the set's elements differ from their mean, tiny beside the mean
    # for these inputs (integers up to 99), so float32 rounding flips the sign of some entries'
    # gradients and Adam's first steps follow it
    keys = [name for name in records[0][-1] if ".fc_k." in name]
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-4, skip=keys)


@pytest.mark.parametrize("ln", [False, True])
def test_set_transformer_with_inducing_points_matches_torch(monkeypatch, ln):
    x = np.random.default_rng(43).standard_normal((3, 7, 2))
    records = _run(
        monkeypatch,
        SET_SOURCE,
        SET_STEP,
        44,
        lambda names: (
            names["SetTransformer"](2, 2, 3, num_inds=4, dim_hidden=8, num_heads=2, ln=ln),
        ),
        lambda names, lib, models: names["main_full"](models[0], lib.tensor(x, dtype=lib.float32)),
    )
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


# -- prototypical networks -------------------------------------------------------------------------
PROTO_SOURCE = """
from torch.autograd import Variable
import torch.optim.lr_scheduler as lr_scheduler

def euclidean_dist(x, y):
    # x: N x D
    # y: M x D
    n = x.size(0)
    m = y.size(0)
    d = x.size(1)
    assert d == y.size(1)

    x = x.unsqueeze(1).expand(n, m, d)
    y = y.unsqueeze(0).expand(n, m, d)

    return torch.pow(x - y, 2).sum(2)

class Flatten(nn.Module):
    def __init__(self):
        super(Flatten, self).__init__()

    def forward(self, x):
        return x.view(x.size(0), -1)

class Protonet(nn.Module):
    def __init__(self, encoder):
        super(Protonet, self).__init__()

        self.encoder = encoder

    def loss(self, sample):
        xs = Variable(sample['xs']) # support
        xq = Variable(sample['xq']) # query

        n_class = xs.size(0)
        assert xq.size(0) == n_class
        n_support = xs.size(1)
        n_query = xq.size(1)

        target_inds = torch.arange(0, n_class).view(n_class, 1, 1).expand(n_class, n_query, 1).long()
        target_inds = Variable(target_inds, requires_grad=False)

        if xq.is_cuda:
            target_inds = target_inds.cuda()

        x = torch.cat([xs.view(n_class * n_support, *xs.size()[2:]),
                       xq.view(n_class * n_query, *xq.size()[2:])], 0)

        z = self.encoder.forward(x)
        z_dim = z.size(-1)

        z_proto = z[:n_class*n_support].view(n_class, n_support, z_dim).mean(1)
        zq = z[n_class*n_support:]

        dists = euclidean_dist(zq, z_proto)

        log_p_y = F.log_softmax(-dists, dim=1).view(n_class, n_query, -1)

        loss_val = -log_p_y.gather(2, target_inds).squeeze().view(-1).mean()

        _, y_hat = log_p_y.max(2)
        acc_val = torch.eq(y_hat, target_inds.squeeze()).float().mean()

        return loss_val, {
            'loss': loss_val.item(),
            'acc': acc_val.item()
        }

def load_protonet_conv(**kwargs):
    x_dim = kwargs['x_dim']
    hid_dim = kwargs['hid_dim']
    z_dim = kwargs['z_dim']

    def conv_block(in_channels, out_channels):
        return nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, padding=1),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(),
            nn.MaxPool2d(2)
        )

    encoder = nn.Sequential(
        conv_block(x_dim[0], hid_dim),
        conv_block(hid_dim, hid_dim),
        conv_block(hid_dim, hid_dim),
        conv_block(hid_dim, z_dim),
        Flatten()
    )

    return Protonet(encoder)

def main(model, episodes, opt):
    optimizer = getattr(optim, opt['train.optim_method'])(model.parameters(), lr = opt['train.learning_rate'], weight_decay = opt['train.weight_decay'])
    scheduler = lr_scheduler.StepLR(optimizer, opt['train.decay_every'], gamma=0.5)
    records = []
    for epoch in range(2):
        model.train()
        for sample in episodes:
            optimizer.zero_grad()
            loss, output = model.loss(sample)
            loss.backward()
            optimizer.step()
            records.append([output['loss'], output['acc']])
        scheduler.step()
    model.eval()
    with torch.no_grad():
        _, output = model.loss(episodes[0])
    records.append([output['loss'], output['acc']])
    records.append({n: v.detach().numpy().copy() for n, v in model.state_dict().items()})
    return records
"""

PROTO_STEP = [
    (
        "            loss.backward()\n            optimizer.step()",
        "            grads = loss.backward()\n            optimizer.step(grads)",
    ),
    (
        "import torch.optim.lr_scheduler as lr_scheduler",
        "import retrograd.optim.lr_scheduler as lr_scheduler",
    ),
]


def test_prototypical_networks_match_torch(monkeypatch):
    rng = np.random.default_rng(45)
    episodes = [
        (rng.standard_normal((3, 2, 1, 28, 28)), rng.standard_normal((3, 4, 1, 28, 28)))
        for _ in range(2)
    ]
    opt = {
        "train.optim_method": "Adam",
        "train.learning_rate": 1e-3,
        "train.weight_decay": 0.0,
        "train.decay_every": 1,
    }

    def go(names, lib, models):
        samples = [
            {"xs": lib.tensor(xs, dtype=lib.float32), "xq": lib.tensor(xq, dtype=lib.float32)}
            for xs, xq in episodes
        ]
        return names["main"](models[0], samples, opt)

    records = _run(
        monkeypatch,
        PROTO_SOURCE,
        PROTO_STEP,
        46,
        lambda names: (names["load_protonet_conv"](x_dim=(1, 28, 28), hid_dim=8, z_dim=8),),
        go,
    )
    # each conv's bias is removed by the BatchNorm after it: its true gradient is 0 (and the
    # running mean takes in its drift)
    biases = [f"encoder.{i}.0.bias" for i in range(4)]
    biases += [f"encoder.{i}.1.running_mean" for i in range(4)]
    # and the last BatchNorm's bias moves every embedding alike, which no distance sees
    biases.append("encoder.3.1.bias")
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5, skip=biases)


def test_flatten_takes_torch_s_keywords():
    """``x.flatten(start_dim=1)`` (found by a sweep of everyday idioms beside these ports)."""
    for lib in (torch, rg):
        x = lib.ones(2, 3, 4)
        assert tuple(x.flatten(start_dim=1).shape) == (2, 12)
        assert tuple(x.flatten(end_dim=1).shape) == (6, 4)
        assert tuple(x.flatten(start_dim=1, end_dim=-1).shape) == (2, 12)
        assert tuple(lib.flatten(x, start_dim=1).shape) == (2, 12)
    with pytest.raises(TypeError, match="start_dim"):
        rg.ones(2, 3).flatten(1, start_dim=1)


def test_comparing_a_tensor_with_none_or_a_string_is_python_s_answer_as_in_torch():
    """``if mask == None:`` (found by the same sweep): torch's ``==`` gives way to Python's
    identity comparison for ``None`` and strings, so the answer is a plain bool."""
    for lib in (torch, rg):
        t = lib.tensor([1.0, 2.0])
        assert (t == None) is False  # noqa: E711 (the idiom under test)
        assert (t != None) is True  # noqa: E711
        assert (t == "mean") is False and (t != "mean") is True
        assert (t == 1.0).tolist() == [True, False]
