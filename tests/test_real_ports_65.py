# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_64.py`` (the
harness: ``tests/real_ports.py``):

- the Child-Sum Tree-LSTM of dasguptar/treelstm.pytorch (``treelstm/model.py``'s
  ``ChildSumTreeLSTM``/``Similarity``/``SimilarityTreeLSTM``, ``tree.py``, ``dataset.py``'s
  ``read_tree`` and ``__getitem__``, ``utils.map_label_to_target``, ``trainer.py``'s ``train``
  and ``test``), on a few hand-made sentence pairs: a recursion over the tree, leaves started
  from ``inputs[0].detach().new(1, mem_dim).fill_(0.).requires_grad_()``, ``torch.split`` of
  the gates by ``iou.size(1) // 3``, ``.repeat(len(child_h), 1)``, ``zip(*map(...))`` of the
  children's states, ``torch.cat`` of tuples, a frozen ``nn.Embedding(..., padding_idx=...)``
  filled by ``weight.data.copy_``, ``deepcopy`` of the dataset's tensors, a dataset indexed by
  the 0-d tensors of ``torch.randperm``, ``math.ceil``/``math.floor`` of a 0-d label,
  ``nn.KLDivLoss()``, ``optim.Adagrad(filter(...), weight_decay=...)`` stepped every
  ``batchsize`` samples with the gradients in between accumulated (ported as a sum of
  ``Gradients``), ``torch.dot(indices, torch.exp(output))`` written into ``predictions[idx]``.
- the Siamese network of harveyslash/Facial-Similarity-with-Siamese-Networks-in-Pytorch,
  narrower on 8x8 images: ``nn.ReflectionPad2d(1)``, ``nn.ReLU(inplace=True)`` before
  ``nn.BatchNorm2d``, the ``ContrastiveLoss`` of ``F.pairwise_distance(..., keepdim = True)``
  and ``torch.clamp(self.margin - d, min=0.0)``, labels made by ``torch.from_numpy(np.array
  ([int(a != b)], dtype=np.float32))`` and batched by a ``DataLoader``; then the same
  embedding trained by the built-in metric losses (``nn.TripletMarginLoss(margin=1.0, p=2,
  swap=True)``, ``nn.TripletMarginWithDistanceLoss(distance_function=nn.PairwiseDistance())``,
  ``nn.CosineEmbeddingLoss(margin=0.2)``) under ``optim.NAdam``.
- the pointer network of shirgur/PointerNet (``PointerNet.py``'s ``Encoder``, ``Attention``,
  ``Decoder``, ``PointerNet``; ``Train.py``'s loop), small, on a sorting task: ``Parameter
  (torch.FloatTensor(hidden_dim), requires_grad=True)`` initialised by the deprecated
  ``nn.init.uniform``, a ``-inf`` parameter expanded by ``init_inf``, ``att[mask] =
  self.inf[mask]``, ``nn.Softmax()`` without ``dim``, ``runner.data[i] = i`` on a repeated
  parameter, ``(runner == indices.unsqueeze(1).expand(...)).float()``, the embedded inputs picked
  by a ``.byte()`` mask (``embedded_inputs[embedding_mask.data]``), ``nn.Conv1d(..., 1, 1)`` as
  the context projection, a ``DataLoader`` of dict samples, ``CrossEntropyLoss`` over the
  softmax outputs.
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


class SharedPermutations:
    """``torch.randperm`` of a library drawing from one seeded stream (so both runs visit the
    samples in the same order)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def randperm(n, dtype=None, device=None, **_):
            return lib.tensor(rng.permutation(n), dtype=dtype or lib.int64)

        self.saved = lib.randperm
        lib.randperm = randperm
        return self

    def __exit__(self, *exc):
        self.lib.randperm = self.saved
        return False


TREE_LSTM_SOURCE = """
import math
from copy import deepcopy

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

PAD = 0


# tree object from stanfordnlp/treelstm
class Tree(object):
    def __init__(self):
        self.parent = None
        self.num_children = 0
        self.children = list()

    def add_child(self, child):
        child.parent = self
        self.num_children += 1
        self.children.append(child)

    def size(self):
        if getattr(self, '_size'):
            return self._size
        count = 1
        for i in range(self.num_children):
            count += self.children[i].size()
        self._size = count
        return self._size

    def depth(self):
        if getattr(self, '_depth'):
            return self._depth
        count = 0
        if self.num_children > 0:
            for i in range(self.num_children):
                child_depth = self.children[i].depth()
                if child_depth > count:
                    count = child_depth
            count += 1
        self._depth = count
        return self._depth


# module for childsumtreelstm
class ChildSumTreeLSTM(nn.Module):
    def __init__(self, in_dim, mem_dim):
        super(ChildSumTreeLSTM, self).__init__()
        self.in_dim = in_dim
        self.mem_dim = mem_dim
        self.ioux = nn.Linear(self.in_dim, 3 * self.mem_dim)
        self.iouh = nn.Linear(self.mem_dim, 3 * self.mem_dim)
        self.fx = nn.Linear(self.in_dim, self.mem_dim)
        self.fh = nn.Linear(self.mem_dim, self.mem_dim)

    def node_forward(self, inputs, child_c, child_h):
        child_h_sum = torch.sum(child_h, dim=0, keepdim=True)

        iou = self.ioux(inputs) + self.iouh(child_h_sum)
        i, o, u = torch.split(iou, iou.size(1) // 3, dim=1)
        i, o, u = F.sigmoid(i), F.sigmoid(o), F.tanh(u)

        f = F.sigmoid(
            self.fh(child_h) +
            self.fx(inputs).repeat(len(child_h), 1)
        )
        fc = torch.mul(f, child_c)

        c = torch.mul(i, u) + torch.sum(fc, dim=0, keepdim=True)
        h = torch.mul(o, F.tanh(c))
        return c, h

    def forward(self, tree, inputs):
        for idx in range(tree.num_children):
            self.forward(tree.children[idx], inputs)

        if tree.num_children == 0:
            child_c = inputs[0].detach().new(1, self.mem_dim).fill_(0.).requires_grad_()
            child_h = inputs[0].detach().new(1, self.mem_dim).fill_(0.).requires_grad_()
        else:
            child_c, child_h = zip(* map(lambda x: x.state, tree.children))
            child_c, child_h = torch.cat(child_c, dim=0), torch.cat(child_h, dim=0)

        tree.state = self.node_forward(inputs[tree.idx], child_c, child_h)
        return tree.state


# module for distance-angle similarity
class Similarity(nn.Module):
    def __init__(self, mem_dim, hidden_dim, num_classes):
        super(Similarity, self).__init__()
        self.mem_dim = mem_dim
        self.hidden_dim = hidden_dim
        self.num_classes = num_classes
        self.wh = nn.Linear(2 * self.mem_dim, self.hidden_dim)
        self.wp = nn.Linear(self.hidden_dim, self.num_classes)

    def forward(self, lvec, rvec):
        mult_dist = torch.mul(lvec, rvec)
        abs_dist = torch.abs(torch.add(lvec, -rvec))
        vec_dist = torch.cat((mult_dist, abs_dist), 1)

        out = F.sigmoid(self.wh(vec_dist))
        out = F.log_softmax(self.wp(out), dim=1)
        return out


# putting the whole model together
class SimilarityTreeLSTM(nn.Module):
    def __init__(self, vocab_size, in_dim, mem_dim, hidden_dim, num_classes, sparsity, freeze):
        super(SimilarityTreeLSTM, self).__init__()
        self.emb = nn.Embedding(vocab_size, in_dim, padding_idx=PAD, sparse=sparsity)
        if freeze:
            self.emb.weight.requires_grad = False
        self.childsumtreelstm = ChildSumTreeLSTM(in_dim, mem_dim)
        self.similarity = Similarity(mem_dim, hidden_dim, num_classes)

    def forward(self, ltree, linputs, rtree, rinputs):
        linputs = self.emb(linputs)
        rinputs = self.emb(rinputs)
        lstate, lhidden = self.childsumtreelstm(ltree, linputs)
        rstate, rhidden = self.childsumtreelstm(rtree, rinputs)
        output = self.similarity(lstate, rstate)
        return output


def map_label_to_target(label, num_classes):
    target = torch.zeros(1, num_classes, dtype=torch.float, device='cpu')
    ceil = int(math.ceil(label))
    floor = int(math.floor(label))
    if ceil == floor:
        target[0, floor-1] = 1
    else:
        target[0, floor-1] = ceil - label
        target[0, ceil-1] = label - floor
    return target


class SICKDataset(object):
    def __init__(self, lsentences, rsentences, lparents, rparents, labels, num_classes):
        self.num_classes = num_classes
        self.lsentences = [torch.tensor(s, dtype=torch.long, device='cpu') for s in lsentences]
        self.rsentences = [torch.tensor(s, dtype=torch.long, device='cpu') for s in rsentences]
        self.ltrees = [self.read_tree(line) for line in lparents]
        self.rtrees = [self.read_tree(line) for line in rparents]
        self.labels = torch.tensor(labels, dtype=torch.float, device='cpu')
        self.size = self.labels.size(0)

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        ltree = deepcopy(self.ltrees[index])
        rtree = deepcopy(self.rtrees[index])
        lsent = deepcopy(self.lsentences[index])
        rsent = deepcopy(self.rsentences[index])
        label = deepcopy(self.labels[index])
        return (ltree, lsent, rtree, rsent, label)

    def read_tree(self, line):
        parents = list(map(int, line.split()))
        trees = dict()
        root = None
        for i in range(1, len(parents) + 1):
            if i - 1 not in trees.keys() and parents[i - 1] != -1:
                idx = i
                prev = None
                while True:
                    parent = parents[idx - 1]
                    if parent == -1:
                        break
                    tree = Tree()
                    if prev is not None:
                        tree.add_child(prev)
                    trees[idx - 1] = tree
                    tree.idx = idx - 1
                    if parent - 1 in trees.keys():
                        trees[parent - 1].add_child(tree)
                        break
                    elif parent == 0:
                        root = tree
                        break
                    else:
                        prev = tree
                        idx = parent
        return root


class Trainer(object):
    def __init__(self, args, model, criterion, optimizer, device):
        super(Trainer, self).__init__()
        self.args = args
        self.model = model
        self.criterion = criterion
        self.optimizer = optimizer
        self.device = device
        self.epoch = 0

    # helper function for training
    def train(self, dataset):
        self.model.train()
        self.optimizer.zero_grad()
        total_loss = 0.0
        indices = torch.randperm(len(dataset), dtype=torch.long, device='cpu')
        for idx in range(len(dataset)):
            ltree, linput, rtree, rinput, label = dataset[indices[idx]]
            target = map_label_to_target(label, dataset.num_classes)
            linput, rinput = linput.to(self.device), rinput.to(self.device)
            target = target.to(self.device)
            output = self.model(ltree, linput, rtree, rinput)
            loss = self.criterion(output, target)
            total_loss += loss.item()
            loss.backward()
            if idx % self.args.batchsize == 0 and idx > 0:
                self.optimizer.step()
                self.optimizer.zero_grad()
        self.epoch += 1
        return total_loss / len(dataset)

    # helper function for testing
    def test(self, dataset):
        self.model.eval()
        with torch.no_grad():
            total_loss = 0.0
            predictions = torch.zeros(len(dataset), dtype=torch.float, device='cpu')
            indices = torch.arange(1, dataset.num_classes + 1, dtype=torch.float, device='cpu')
            for idx in range(len(dataset)):
                ltree, linput, rtree, rinput, label = dataset[idx]
                target = map_label_to_target(label, dataset.num_classes)
                linput, rinput = linput.to(self.device), rinput.to(self.device)
                target = target.to(self.device)
                output = self.model(ltree, linput, rtree, rinput)
                loss = self.criterion(output, target)
                total_loss += loss.item()
                output = output.squeeze().to('cpu')
                predictions[idx] = torch.dot(indices, torch.exp(output))
        return total_loss / len(dataset), predictions


def main(args, dataset, glove_emb):
    device = torch.device("cpu")
    model = SimilarityTreeLSTM(
        args.vocab_size,
        args.input_dim,
        args.mem_dim,
        args.hidden_dim,
        args.num_classes,
        args.sparse,
        args.freeze_embed)
    initialize(model)
    criterion = nn.KLDivLoss()
    emb = torch.zeros(args.vocab_size, glove_emb.size(1), dtype=torch.float, device=device)
    emb.copy_(glove_emb)
    emb[PAD].zero_()
    model.emb.weight.data.copy_(emb)
    model.to(device), criterion.to(device)
    optimizer = optim.Adagrad(filter(lambda p: p.requires_grad,
                                     model.parameters()), lr=args.lr, weight_decay=args.wd)
    trainer = Trainer(args, model, criterion, optimizer, device)
    for epoch in range(args.epochs):
        train_loss = trainer.train(dataset)
        test_loss, test_pred = trainer.test(dataset)
        print('Epoch {}, train loss {:.4f}'.format(epoch, train_loss))
        record.append([train_loss, test_loss])
        record.append(test_pred.numpy().copy())
    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
"""

TREE_LSTM_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\n",
    ),
    (
        "        self.optimizer.zero_grad()\n        total_loss = 0.0\n",
        "        self.optimizer.zero_grad()\n        grads = None\n        total_loss = 0.0\n",
    ),
    (
        "            loss.backward()\n",
        "            sample_grads = loss.backward()\n            grads = sample_grads if grads is None else grads + sample_grads\n",
    ),
    (
        "                self.optimizer.step()\n                self.optimizer.zero_grad()\n",
        "                self.optimizer.step(grads)\n                self.optimizer.zero_grad()\n                grads = None\n",
    ),
]


class _TreeArgs:
    vocab_size = 9
    input_dim = 6
    mem_dim = 5
    hidden_dim = 4
    num_classes = 5
    sparse = False
    freeze_embed = True
    lr = 0.05
    wd = 1e-4
    batchsize = 2
    epochs = 2


def test_child_sum_tree_lstm_similarity_trains_as_torch(capsys):
    rng = np.random.default_rng(6501)
    glove = (rng.standard_normal((_TreeArgs.vocab_size, _TreeArgs.input_dim)) * 0.5).astype(
        np.float32
    )
    # dependency trees as SICK's parents files write them (1-based parents, 0 the root)
    lparents = ["2 0 2", "0 1 1 3", "3 3 0 3 4", "0 1"]
    rparents = ["0 1", "2 0 2 3", "2 0", "3 1 0 3"]
    lsentences = [[1, 2, 3], [4, 5, 6, 7], [8, 1, 2, 3, 4], [5, 6]]
    rsentences = [[3, 4], [1, 2, 8, 7], [6, 5], [2, 3, 4, 8]]
    labels = [2.5, 4.0, 1.2, 3.6]
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = TREE_LSTM_SOURCE if lib is torch else port(TREE_LSTM_SOURCE, TREE_LSTM_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        dataset = names["SICKDataset"](
            lsentences, rsentences, lparents, rparents, labels, _TreeArgs.num_classes
        )
        with SharedPermutations(lib, 6501):
            names["main"](_TreeArgs, dataset, lib.tensor(glove))
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)


SIAMESE_SOURCE = """
import numpy as np
import torch
from torch.utils.data import DataLoader,Dataset
import torch.nn as nn
from torch import optim
import torch.nn.functional as F


class Config():
    train_batch_size = 4
    train_number_epochs = 2


class SiameseNetworkDataset(Dataset):

    def __init__(self,images,classes,pairs):
        self.images = images
        self.classes = classes
        self.pairs = pairs

    def __getitem__(self,index):
        i0, i1 = self.pairs[index]
        img0 = torch.from_numpy(self.images[i0])
        img1 = torch.from_numpy(self.images[i1])
        return img0, img1 , torch.from_numpy(np.array([int(self.classes[i1]!=self.classes[i0])],dtype=np.float32))

    def __len__(self):
        return len(self.pairs)


class SiameseNetwork(nn.Module):
    def __init__(self):
        super(SiameseNetwork, self).__init__()
        self.cnn1 = nn.Sequential(
            nn.ReflectionPad2d(1),
            nn.Conv2d(1, 4, kernel_size=3),
            nn.ReLU(inplace=True),
            nn.BatchNorm2d(4),

            nn.ReflectionPad2d(1),
            nn.Conv2d(4, 8, kernel_size=3),
            nn.ReLU(inplace=True),
            nn.BatchNorm2d(8),


            nn.ReflectionPad2d(1),
            nn.Conv2d(8, 8, kernel_size=3),
            nn.ReLU(inplace=True),
            nn.BatchNorm2d(8),


        )

        self.fc1 = nn.Sequential(
            nn.Linear(8*8*8, 16),
            nn.ReLU(inplace=True),

            nn.Linear(16, 16),
            nn.ReLU(inplace=True),

            nn.Linear(16, 5))

    def forward_once(self, x):
        output = self.cnn1(x)
        output = output.view(output.size()[0], -1)
        output = self.fc1(output)
        return output

    def forward(self, input1, input2):
        output1 = self.forward_once(input1)
        output2 = self.forward_once(input2)
        return output1, output2


class ContrastiveLoss(torch.nn.Module):
    \"\"\"
    Contrastive loss function.
    Based on: http://yann.lecun.com/exdb/publis/pdf/hadsell-chopra-lecun-06.pdf
    \"\"\"

    def __init__(self, margin=2.0):
        super(ContrastiveLoss, self).__init__()
        self.margin = margin

    def forward(self, output1, output2, label):
        euclidean_distance = F.pairwise_distance(output1, output2, keepdim = True)
        loss_contrastive = torch.mean((1-label) * torch.pow(euclidean_distance, 2) +
                                      (label) * torch.pow(torch.clamp(self.margin - euclidean_distance, min=0.0), 2))


        return loss_contrastive


def main(images, classes, pairs, triplets):
    siamese_dataset = SiameseNetworkDataset(images, classes, pairs)
    train_dataloader = DataLoader(siamese_dataset,
                            shuffle=False,
                            num_workers=0,
                            batch_size=Config.train_batch_size)
    net = SiameseNetwork()
    initialize(net)
    criterion = ContrastiveLoss()
    optimizer = optim.Adam(net.parameters(),lr = 0.0005 )

    counter = []
    loss_history = []
    iteration_number= 0

    for epoch in range(0,Config.train_number_epochs):
        for i, data in enumerate(train_dataloader,0):
            img0, img1 , label = data
            optimizer.zero_grad()
            output1,output2 = net(img0,img1)
            loss_contrastive = criterion(output1,output2,label)
            loss_contrastive.backward()
            optimizer.step()
            if i %1 == 0 :
                print("Epoch number {}\\n Current loss {}\\n".format(epoch,round(loss_contrastive.item(), 3)))
                iteration_number +=1
                counter.append(iteration_number)
                loss_history.append(loss_contrastive.item())
    record.append(loss_history)

    net.eval()
    test_dataloader = DataLoader(siamese_dataset,num_workers=0,batch_size=1,shuffle=False)
    dataiter = iter(test_dataloader)
    x0,_,_ = next(dataiter)
    for i in range(3):
        _,x1,label2 = next(dataiter)
        concatenated = torch.cat((x0,x1),0)
        output1,output2 = net(Variable(x0),Variable(x1))
        euclidean_distance = F.pairwise_distance(output1, output2)
        record.append(euclidean_distance.item())
        record.append(concatenated.shape[0])

    # the same embedding trained on triplets by the built-in metric losses
    net.train()
    triplet = nn.TripletMarginLoss(margin=1.0, p=2, swap=True)
    by_distance = nn.TripletMarginWithDistanceLoss(distance_function=nn.PairwiseDistance(), margin=0.5)
    cosine = nn.CosineEmbeddingLoss(margin=0.2)
    optimizer = optim.NAdam(net.parameters(), lr=1e-3)
    a, p, n = (torch.from_numpy(images[list(t)]) for t in zip(*triplets))
    for step in range(2):
        optimizer.zero_grad()
        anchor, positive = net(a, p)
        negative = net.forward_once(n)
        y = torch.cat([torch.ones(len(a)), -torch.ones(len(a))])
        loss = triplet(anchor, positive, negative) + by_distance(anchor, positive, negative) + cosine(torch.cat([anchor, anchor]), torch.cat([positive, negative]), y)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    record.append({k: v.detach().numpy().copy() for k, v in net.state_dict().items()})
"""

SIAMESE_STEPS = [
    (
        "import torch\nfrom torch.utils.data import DataLoader,Dataset\nimport torch.nn as nn\nfrom torch import optim\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nfrom retrograd.utils.data import DataLoader,Dataset\nimport retrograd.nn as nn\nfrom retrograd import optim\nimport retrograd.nn.functional as F\n",
    ),
    (
        "            loss_contrastive.backward()\n            optimizer.step()\n",
        "            grads = loss_contrastive.backward()\n            optimizer.step(grads)\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_siamese_contrastive_and_triplet_losses_train_as_torch(capsys):
    rng = np.random.default_rng(6502)
    images = rng.uniform(size=(8, 1, 8, 8)).astype(np.float32)
    classes = [0, 1, 2, 0, 1, 2, 0, 1]
    pairs = [(0, 3), (0, 1), (1, 4), (2, 7), (5, 2), (6, 0), (3, 4), (7, 1)]
    triplets = [(0, 3, 1), (1, 4, 2), (2, 5, 6), (7, 4, 0)]
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = SIAMESE_SOURCE if lib is torch else port(SIAMESE_SOURCE, SIAMESE_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize, Variable=lambda t: t)
        names["main"](images, classes, pairs, triplets)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


POINTER_SOURCE = """
import torch
import torch.nn as nn
from torch.nn import Parameter
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import Dataset, DataLoader
from torch.autograd import Variable


class Encoder(nn.Module):
    \"\"\"
    Encoder class for Pointer-Net
    \"\"\"

    def __init__(self, embedding_dim,
                 hidden_dim,
                 n_layers,
                 dropout,
                 bidir):
        super(Encoder, self).__init__()
        self.hidden_dim = hidden_dim//2 if bidir else hidden_dim
        self.n_layers = n_layers*2 if bidir else n_layers
        self.bidir = bidir
        self.lstm = nn.LSTM(embedding_dim,
                            self.hidden_dim,
                            n_layers,
                            dropout=dropout,
                            bidirectional=bidir)

        # Used for propagating .cuda() command
        self.h0 = Parameter(torch.zeros(1), requires_grad=False)
        self.c0 = Parameter(torch.zeros(1), requires_grad=False)

    def forward(self, embedded_inputs,
                hidden):
        # embedded_inputs: (batch, seq_len, embedding_dim) -> (seq_len, batch, embedding_dim)
        embedded_inputs = embedded_inputs.permute(1, 0, 2)

        outputs, hidden = self.lstm(embedded_inputs, hidden)

        return outputs.permute(1, 0, 2), hidden

    def init_hidden(self, embedded_inputs):
        batch_size = embedded_inputs.size(0)

        # Reshaping (Expanding)
        h0 = self.h0.unsqueeze(0).unsqueeze(0).repeat(self.n_layers,
                                                      batch_size,
                                                      self.hidden_dim)
        c0 = self.h0.unsqueeze(0).unsqueeze(0).repeat(self.n_layers,
                                                      batch_size,
                                                      self.hidden_dim)

        return h0, c0


class Attention(nn.Module):
    \"\"\"
    Attention model for Pointer-Net
    \"\"\"

    def __init__(self, input_dim,
                 hidden_dim):
        super(Attention, self).__init__()

        self.input_dim = input_dim
        self.hidden_dim = hidden_dim

        self.input_linear = nn.Linear(input_dim, hidden_dim)
        self.context_linear = nn.Conv1d(input_dim, hidden_dim, 1, 1)
        self.V = Parameter(torch.FloatTensor(hidden_dim), requires_grad=True)
        self._inf = Parameter(torch.FloatTensor([float('-inf')]), requires_grad=False)
        self.tanh = nn.Tanh()
        self.softmax = nn.Softmax()

        # Initialize vector V
        nn.init.uniform(self.V, -1, 1)

    def forward(self, input,
                context,
                mask):
        # (batch, hidden_dim, seq_len)
        inp = self.input_linear(input).unsqueeze(2).expand(-1, -1, context.size(1))

        # (batch, hidden_dim, seq_len)
        context = context.permute(0, 2, 1)
        ctx = self.context_linear(context)

        # (batch, 1, hidden_dim)
        V = self.V.unsqueeze(0).expand(context.size(0), -1).unsqueeze(1)

        # (batch, seq_len)
        att = torch.bmm(V, self.tanh(inp + ctx)).squeeze(1)
        if len(att[mask]) > 0:
            att[mask] = self.inf[mask]
        alpha = self.softmax(att)

        hidden_state = torch.bmm(ctx, alpha.unsqueeze(2)).squeeze(2)

        return hidden_state, alpha

    def init_inf(self, mask_size):
        self.inf = self._inf.unsqueeze(1).expand(*mask_size)


class Decoder(nn.Module):
    \"\"\"
    Decoder model for Pointer-Net
    \"\"\"

    def __init__(self, embedding_dim,
                 hidden_dim):
        super(Decoder, self).__init__()
        self.embedding_dim = embedding_dim
        self.hidden_dim = hidden_dim

        self.input_to_hidden = nn.Linear(embedding_dim, 4 * hidden_dim)
        self.hidden_to_hidden = nn.Linear(hidden_dim, 4 * hidden_dim)
        self.hidden_out = nn.Linear(hidden_dim * 2, hidden_dim)
        self.att = Attention(hidden_dim, hidden_dim)

        # Used for propagating .cuda() command
        self.mask = Parameter(torch.ones(1), requires_grad=False)
        self.runner = Parameter(torch.zeros(1), requires_grad=False)

    def forward(self, embedded_inputs,
                decoder_input,
                hidden,
                context):
        batch_size = embedded_inputs.size(0)
        input_length = embedded_inputs.size(1)

        # (batch, seq_len)
        mask = self.mask.repeat(input_length).unsqueeze(0).repeat(batch_size, 1)
        self.att.init_inf(mask.size())

        # Generating arang(input_length), broadcasted across batch_size
        runner = self.runner.repeat(input_length)
        for i in range(input_length):
            runner.data[i] = i
        runner = runner.unsqueeze(0).expand(batch_size, -1).long()

        outputs = []
        pointers = []

        def step(x, hidden):
            # Regular LSTM
            h, c = hidden

            gates = self.input_to_hidden(x) + self.hidden_to_hidden(h)
            input, forget, cell, out = gates.chunk(4, 1)

            input = F.sigmoid(input)
            forget = F.sigmoid(forget)
            cell = F.tanh(cell)
            out = F.sigmoid(out)

            c_t = (forget * c) + (input * cell)
            h_t = out * F.tanh(c_t)

            # Attention section
            hidden_t, output = self.att(h_t, context, torch.eq(mask, 0))
            hidden_t = F.tanh(self.hidden_out(torch.cat((hidden_t, h_t), 1)))

            return hidden_t, c_t, output

        # Recurrence loop
        for _ in range(input_length):
            h_t, c_t, outs = step(decoder_input, hidden)
            hidden = (h_t, c_t)

            # Masking selected inputs
            masked_outs = outs * mask

            # Get maximum probabilities and indices
            max_probs, indices = masked_outs.max(1)
            one_hot_pointers = (runner == indices.unsqueeze(1).expand(-1, outs.size()[1])).float()

            # Update mask to ignore seen indices
            mask  = mask * (1 - one_hot_pointers)

            # Get embedded inputs by max indices
            embedding_mask = one_hot_pointers.unsqueeze(2).expand(-1, -1, self.embedding_dim).byte()
            decoder_input = embedded_inputs[embedding_mask.data].view(batch_size, self.embedding_dim)

            outputs.append(outs.unsqueeze(0))
            pointers.append(indices.unsqueeze(1))

        outputs = torch.cat(outputs).permute(1, 0, 2)
        pointers = torch.cat(pointers, 1)

        return (outputs, pointers), hidden


class PointerNet(nn.Module):
    \"\"\"
    Pointer-Net
    \"\"\"

    def __init__(self, embedding_dim,
                 hidden_dim,
                 lstm_layers,
                 dropout,
                 bidir=False):
        super(PointerNet, self).__init__()
        self.embedding_dim = embedding_dim
        self.bidir = bidir
        self.embedding = nn.Linear(2, embedding_dim)
        self.encoder = Encoder(embedding_dim,
                               hidden_dim,
                               lstm_layers,
                               dropout,
                               bidir)
        self.decoder = Decoder(embedding_dim, hidden_dim)
        self.decoder_input0 = Parameter(torch.FloatTensor(embedding_dim), requires_grad=False)

        # Initialize decoder_input0
        nn.init.uniform(self.decoder_input0, -1, 1)

    def forward(self, inputs):
        batch_size = inputs.size(0)
        input_length = inputs.size(1)

        decoder_input0 = self.decoder_input0.unsqueeze(0).expand(batch_size, -1)

        inputs = inputs.view(batch_size * input_length, -1)
        embedded_inputs = self.embedding(inputs).view(batch_size, input_length, -1)

        encoder_hidden0 = self.encoder.init_hidden(embedded_inputs)
        encoder_outputs, encoder_hidden = self.encoder(embedded_inputs,
                                                       encoder_hidden0)
        if self.bidir:
            decoder_hidden0 = (torch.cat(encoder_hidden[0][-2:], dim=-1),
                               torch.cat(encoder_hidden[1][-2:], dim=-1))
        else:
            decoder_hidden0 = (encoder_hidden[0][-1],
                               encoder_hidden[1][-1])
        (outputs, pointers), decoder_hidden = self.decoder(embedded_inputs,
                                                           decoder_input0,
                                                           decoder_hidden0,
                                                           encoder_outputs)

        return  outputs, pointers


class SortDataset(Dataset):
    def __init__(self, points):
        self.points = points

    def __len__(self):
        return len(self.points)

    def __getitem__(self, idx):
        points = self.points[idx]
        solution = np.argsort(points[:, 0])
        sample = {'Points':torch.from_numpy(points).float(), 'Solution':torch.from_numpy(solution).long()}
        return sample


def main(params, points):
    model = PointerNet(params.embedding_size,
                       params.hiddens,
                       params.nof_lstms,
                       params.dropout,
                       params.bidir)
    initialize(model)
    dataset = SortDataset(points)
    dataloader = DataLoader(dataset,
                            batch_size=params.batch_size,
                            shuffle=False,
                            num_workers=0)

    CCE = torch.nn.CrossEntropyLoss()
    model_optim = optim.Adam(filter(lambda p: p.requires_grad,
                                    model.parameters()),
                             lr=params.lr)

    losses = []

    for epoch in range(params.nof_epoch):
        batch_loss = []
        iterator = dataloader

        for i_batch, sample_batched in enumerate(iterator):
            train_batch = Variable(sample_batched['Points'])
            target_batch = Variable(sample_batched['Solution'])

            o, p = model(train_batch)
            o = o.contiguous().view(-1, o.size()[-1])

            target_batch = target_batch.view(-1)

            loss = CCE(o, target_batch)

            losses.append(loss.data.item())
            batch_loss.append(loss.data.item())

            model_optim.zero_grad()
            loss.backward()
            model_optim.step()

            record.append(p.numpy().tolist())
        print('Epoch %i: loss %.4f' % (epoch+1, np.average(batch_loss)))
    record.append(losses)
    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
"""

POINTER_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.nn import Parameter\nimport torch.nn.functional as F\nimport torch.optim as optim\nfrom torch.utils.data import Dataset, DataLoader\nfrom torch.autograd import Variable\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd.nn import Parameter\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\nfrom retrograd.utils.data import Dataset, DataLoader\nfrom retrograd.autograd import Variable\n",
    ),
    (
        "            loss.backward()\n            model_optim.step()\n",
        "            grads = loss.backward()\n            model_optim.step(grads)\n",
    ),
    # retrograd has no uint8 (its masks are bool; torch 2.13 warns that uint8 indexing is
    # deprecated for this mask)
    (
        ".expand(-1, -1, self.embedding_dim).byte()",
        ".expand(-1, -1, self.embedding_dim).bool()",
    ),
]


class _PointerParams:
    embedding_size = 6
    hiddens = 8
    nof_lstms = 1
    dropout = 0.0
    bidir = False
    batch_size = 3
    lr = 1e-2
    nof_epoch = 2


def test_pointer_network_trains_as_torch(capsys):
    rng = np.random.default_rng(6503)
    points = rng.uniform(size=(6, 4, 2))
    params = _PointerParams
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = POINTER_SOURCE if lib is torch else port(POINTER_SOURCE, POINTER_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        names["main"](params, points)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


def test_pointer_network_s_bidirectional_branch_fails_as_in_torch():
    """``torch.cat(encoder_hidden[0][-2:], dim=-1)`` gives ``cat`` one tensor: torch refuses it
    (a TypeError) where iterating it would join its two slices into a wrong-sized state."""
    points = np.random.default_rng(6504).uniform(size=(3, 4, 2))
    params = type("Params", (_PointerParams,), {"bidir": True})
    initialize = initializer()
    for lib in (torch, rg):
        text = POINTER_SOURCE if lib is torch else port(POINTER_SOURCE, POINTER_STEPS)
        names = run_source(text, lib, record=[], initialize=initialize)
        with pytest.raises(TypeError, match="cat"):
            names["main"](params, points)
    hidden = rg.ones((2, 3, 4))
    for join in (rg.cat, rg.stack, rg.hstack, rg.vstack, rg.dstack, rg.column_stack):
        with pytest.raises(rg.DTypeError, match=r"not a Tensor \(of shape \[2, 3, 4\]\)"):
            join(hidden)
    assert rg.cat(hidden.unbind(0), dim=-1).shape == (3, 8)
