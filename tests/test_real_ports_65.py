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
  softmax outputs. Its bidirectional branch (``torch.cat(encoder_hidden[0][-2:], dim=-1)``,
  one tensor) fails in torch, and so it must in retrograd.
- NetVLAD with the hard triplet loss of lyakaap/NetVLAD-pytorch (``netvlad.py``,
  ``hard_triplet_loss.py``, the README's example) over a small convolutional base: the
  convolution's ``weight``/``bias`` replaced by ``nn.Parameter`` values computed from the centroids,
  ``F.normalize`` three times, ``x_flatten.expand(K, -1, -1, -1).permute(1, 0, 2, 3)`` minus
  the expanded centroids, ``residual *= soft_assign.unsqueeze(2)`` in the graph, the
  pairwise distances with their masked ``sqrt``, the triplet masks of ``torch.eye(n) ^ 1``
  (``.byte()``, as written since retrograd has uint8 tensors) and ``labels_equal ^ 1`` of a bool tensor, both the
  batch-all and the hardest variants.
- the neural arithmetic logic units of kevinzakka/NALU-pytorch (``models/nac.py``,
  ``models/nalu.py``, ``main.py``'s ``generate_data``/``train``/``test``), small: a
  ``Parameter`` computed at construction from two uninitialised ``torch.Tensor(out, in)``
  parameters (the repository's known quirk: ``W`` is trained, ``W_hat``/``M_hat`` are not),
  ``register_parameter('bias', None)`` passed to ``F.linear``, ``init.kaiming_uniform_(...,
  a=math.sqrt(5))``, ``torch.FloatTensor(dim).uniform_(*support).unsqueeze_(1)``,
  ``torch.FloatTensor`` of a list of pairs of 0-d tensors, list-indexed rows, RMSprop, the
  models printed with their ``extra_repr``.
"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    """Torch's initial weights (which both runs start from) and the programs' draws from
    fixed seeds."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


def defined_initializer(seed):
    """:func:`initializer`, with torch's parameters first overwritten by draws of a seeded
    stream: for programs that leave a parameter as ``torch.Tensor(n, m)``'s uninitialised
    memory (or compute one from such memory), which could hold anything, NaN included."""
    initialize = initializer()
    rng = np.random.default_rng(seed)

    def defined(module):
        if isinstance(module, torch.nn.Module):
            with torch.no_grad():
                for parameter in module.parameters():
                    if parameter.requires_grad:  # (a frozen pretrained table is defined)
                        values = rng.uniform(-0.5, 0.5, tuple(parameter.shape))
                        parameter.copy_(torch.tensor(values))
        initialize(module)

    return defined


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


NETVLAD_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class NetVLAD(nn.Module):
    \"\"\"NetVLAD layer implementation\"\"\"

    def __init__(self, num_clusters=64, dim=128, alpha=100.0,
                 normalize_input=True):
        \"\"\"
        Args:
            num_clusters : int
                The number of clusters
            dim : int
                Dimension of descriptors
            alpha : float
                Parameter of initialization. Larger value is harder assignment.
            normalize_input : bool
                If true, descriptor-wise L2 normalization is applied to input.
        \"\"\"
        super(NetVLAD, self).__init__()
        self.num_clusters = num_clusters
        self.dim = dim
        self.alpha = alpha
        self.normalize_input = normalize_input
        self.conv = nn.Conv2d(dim, num_clusters, kernel_size=(1, 1), bias=True)
        self.centroids = nn.Parameter(torch.rand(num_clusters, dim))
        self._init_params()

    def _init_params(self):
        self.conv.weight = nn.Parameter(
            (2.0 * self.alpha * self.centroids).unsqueeze(-1).unsqueeze(-1)
        )
        self.conv.bias = nn.Parameter(
            - self.alpha * self.centroids.norm(dim=1)
        )

    def forward(self, x):
        N, C = x.shape[:2]

        if self.normalize_input:
            x = F.normalize(x, p=2, dim=1)  # across descriptor dim

        # soft-assignment
        soft_assign = self.conv(x).view(N, self.num_clusters, -1)
        soft_assign = F.softmax(soft_assign, dim=1)

        x_flatten = x.view(N, C, -1)

        # calculate residuals to each clusters
        residual = x_flatten.expand(self.num_clusters, -1, -1, -1).permute(1, 0, 2, 3) - \\
            self.centroids.expand(x_flatten.size(-1), -1, -1).permute(1, 2, 0).unsqueeze(0)
        residual *= soft_assign.unsqueeze(2)
        vlad = residual.sum(dim=-1)

        vlad = F.normalize(vlad, p=2, dim=2)  # intra-normalization
        vlad = vlad.view(x.size(0), -1)  # flatten
        vlad = F.normalize(vlad, p=2, dim=1)  # L2 normalize

        return vlad


class EmbedNet(nn.Module):
    def __init__(self, base_model, net_vlad):
        super(EmbedNet, self).__init__()
        self.base_model = base_model
        self.net_vlad = net_vlad

    def forward(self, x):
        x = self.base_model(x)
        embedded_x = self.net_vlad(x)
        return embedded_x


class HardTripletLoss(nn.Module):
    \"\"\"Hard/Hardest Triplet Loss
    (pytorch implementation of https://omoindrot.github.io/triplet-loss)

    For each anchor, we get the hardest positive and hardest negative to form a triplet.
    \"\"\"
    def __init__(self, margin=0.1, hardest=False, squared=False):
        \"\"\"
        Args:
            margin: margin for triplet loss
            hardest: If true, loss is considered only hardest triplets.
            squared: If true, output is the pairwise squared euclidean distance matrix.
                If false, output is the pairwise euclidean distance matrix.
        \"\"\"
        super(HardTripletLoss, self).__init__()
        self.margin = margin
        self.hardest = hardest
        self.squared = squared

    def forward(self, embeddings, labels):
        \"\"\"
        Args:
            labels: labels of the batch, of size (batch_size,)
            embeddings: tensor of shape (batch_size, embed_dim)

        Returns:
            triplet_loss: scalar tensor containing the triplet loss
        \"\"\"
        pairwise_dist = _pairwise_distance(embeddings, squared=self.squared)

        if self.hardest:
            # Get the hardest positive pairs
            mask_anchor_positive = _get_anchor_positive_triplet_mask(labels).float()
            valid_positive_dist = pairwise_dist * mask_anchor_positive
            hardest_positive_dist, _ = torch.max(valid_positive_dist, dim=1, keepdim=True)

            # Get the hardest negative pairs
            mask_anchor_negative = _get_anchor_negative_triplet_mask(labels).float()
            max_anchor_negative_dist, _ = torch.max(pairwise_dist, dim=1, keepdim=True)
            anchor_negative_dist = pairwise_dist + max_anchor_negative_dist * (
                    1.0 - mask_anchor_negative)
            hardest_negative_dist, _ = torch.min(anchor_negative_dist, dim=1, keepdim=True)

            # Combine biggest d(a, p) and smallest d(a, n) into final triplet loss
            triplet_loss = F.relu(hardest_positive_dist - hardest_negative_dist + 0.1)
            triplet_loss = torch.mean(triplet_loss)
        else:
            anc_pos_dist = pairwise_dist.unsqueeze(dim=2)
            anc_neg_dist = pairwise_dist.unsqueeze(dim=1)

            # Compute a 3D tensor of size (batch_size, batch_size, batch_size)
            # triplet_loss[i, j, k] will contain the triplet loss of anc=i, pos=j, neg=k
            # Uses broadcasting where the 1st argument has shape (batch_size, batch_size, 1)
            # and the 2nd (batch_size, 1, batch_size)
            loss = anc_pos_dist - anc_neg_dist + self.margin

            mask = _get_triplet_mask(labels).float()
            triplet_loss = loss * mask

            # Remove negative losses (i.e. the easy triplets)
            triplet_loss = F.relu(triplet_loss)

            # Count number of hard triplets (where triplet_loss > 0)
            hard_triplets = torch.gt(triplet_loss, 1e-16).float()
            num_hard_triplets = torch.sum(hard_triplets)

            triplet_loss = torch.sum(triplet_loss) / (num_hard_triplets + 1e-16)

        return triplet_loss


def _pairwise_distance(x, squared=False, eps=1e-16):
    # Compute the 2D matrix of distances between all the embeddings.

    cor_mat = torch.matmul(x, x.t())
    norm_mat = cor_mat.diag()
    distances = norm_mat.unsqueeze(1) - 2 * cor_mat + norm_mat.unsqueeze(0)
    distances = F.relu(distances)

    if not squared:
        mask = torch.eq(distances, 0.0).float()
        distances = distances + mask * eps
        distances = torch.sqrt(distances)
        distances = distances * (1.0 - mask)

    return distances


def _get_anchor_positive_triplet_mask(labels):
    # Return a 2D mask where mask[a, p] is True iff a and p are distinct and have same label.

    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")

    indices_not_same = torch.eye(labels.shape[0]).to(device).byte() ^ 1

    # Check if labels[i] == labels[j]
    labels_equal = torch.unsqueeze(labels, 0) == torch.unsqueeze(labels, 1)

    mask = indices_not_same * labels_equal

    return mask


def _get_anchor_negative_triplet_mask(labels):
    # Return a 2D mask where mask[a, n] is True iff a and n have distinct labels.

    # Check if labels[i] == labels[k]
    labels_equal = torch.unsqueeze(labels, 0) == torch.unsqueeze(labels, 1)
    mask = labels_equal ^ 1

    return mask


def _get_triplet_mask(labels):
    \"\"\"Return a 3D mask where mask[a, p, n] is True iff the triplet (a, p, n) is valid.

    A triplet (i, j, k) is valid if:
        - i, j, k are distinct
        - labels[i] == labels[j] and labels[i] != labels[k]
    \"\"\"
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")

    # Check that i, j and k are distinct
    indices_not_same = torch.eye(labels.shape[0]).to(device).byte() ^ 1
    i_not_equal_j = torch.unsqueeze(indices_not_same, 2)
    i_not_equal_k = torch.unsqueeze(indices_not_same, 1)
    j_not_equal_k = torch.unsqueeze(indices_not_same, 0)
    distinct_indices = i_not_equal_j * i_not_equal_k * j_not_equal_k

    # Check if labels[i] == labels[j] and labels[i] != labels[k]
    label_equal = torch.eq(torch.unsqueeze(labels, 0), torch.unsqueeze(labels, 1))
    i_equal_j = torch.unsqueeze(label_equal, 2)
    i_equal_k = torch.unsqueeze(label_equal, 1)
    valid_labels = i_equal_j * (i_equal_k ^ 1)

    mask = distinct_indices * valid_labels   # Combine the two masks

    return mask


def main(hardest):
    base_model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(inplace=True),
    )
    dim = list(base_model.parameters())[-1].shape[0]  # last channels (512)

    # Define model for embedding
    net_vlad = NetVLAD(num_clusters=3, dim=dim, alpha=1.0)
    model = EmbedNet(base_model, net_vlad)
    initialize(model)

    # Define loss
    criterion = HardTripletLoss(margin=0.1, hardest=hardest)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    # This is just toy example. Typically, the number of samples in each classes are 4.
    labels = torch.randint(0, 3, (8, )).long()
    x = torch.rand(8, 3, 8, 8)
    for step in range(2):
        output = model(x)

        triplet_loss = criterion(output, labels)
        optimizer.zero_grad()
        triplet_loss.backward()
        optimizer.step()
        record.append(triplet_loss.item())
    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
"""

NETVLAD_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "        triplet_loss.backward()\n        optimizer.step()\n",
        "        grads = triplet_loss.backward()\n        optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("hardest", [False, True])
def test_netvlad_with_hard_triplet_loss_trains_as_torch(hardest):
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = NETVLAD_SOURCE if lib is torch else port(NETVLAD_SOURCE, NETVLAD_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        with SharedDraws(lib, 6505):
            names["main"](hardest)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)


NALU_SOURCE = """
import math
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import init
from torch.nn.parameter import Parameter


class NeuralAccumulatorCell(nn.Module):
    \"\"\"A Neural Accumulator (NAC) cell [1].

    Attributes:
        in_dim: size of the input sample.
        out_dim: size of the output sample.

    Sources:
        [1]: https://arxiv.org/abs/1808.00508
    \"\"\"
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.in_dim = in_dim
        self.out_dim = out_dim

        self.W_hat = Parameter(torch.Tensor(out_dim, in_dim))
        self.M_hat = Parameter(torch.Tensor(out_dim, in_dim))
        self.W = Parameter(torch.tanh(self.W_hat) * torch.sigmoid(self.M_hat))
        self.register_parameter('bias', None)

        init.kaiming_uniform_(self.W_hat, a=math.sqrt(5))
        init.kaiming_uniform_(self.M_hat, a=math.sqrt(5))

    def forward(self, input):
        return F.linear(input, self.W, self.bias)

    def extra_repr(self):
        return 'in_dim={}, out_dim={}'.format(
            self.in_dim, self.out_dim
        )


class NAC(nn.Module):
    \"\"\"A stack of NAC layers.

    Attributes:
        num_layers: the number of NAC layers.
        in_dim: the size of the input sample.
        hidden_dim: the size of the hidden layers.
        out_dim: the size of the output.
    \"\"\"
    def __init__(self, num_layers, in_dim, hidden_dim, out_dim):
        super().__init__()
        self.num_layers = num_layers
        self.in_dim = in_dim
        self.hidden_dim = hidden_dim
        self.out_dim = out_dim

        layers = []
        for i in range(num_layers):
            layers.append(
                NeuralAccumulatorCell(
                    hidden_dim if i > 0 else in_dim,
                    hidden_dim if i < num_layers - 1 else out_dim,
                )
            )
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        out = self.model(x)
        return out


class NeuralArithmeticLogicUnitCell(nn.Module):
    \"\"\"A Neural Arithmetic Logic Unit (NALU) cell [1].

    Attributes:
        in_dim: size of the input sample.
        out_dim: size of the output sample.

    Sources:
        [1]: https://arxiv.org/abs/1808.00508
    \"\"\"
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.in_dim = in_dim
        self.out_dim = out_dim
        self.eps = 1e-10

        self.G = Parameter(torch.Tensor(out_dim, in_dim))
        self.nac = NeuralAccumulatorCell(in_dim, out_dim)
        self.register_parameter('bias', None)

        init.kaiming_uniform_(self.G, a=math.sqrt(5))

    def forward(self, input):
        a = self.nac(input)
        g = torch.sigmoid(F.linear(input, self.G, self.bias))
        add_sub = g * a
        log_input = torch.log(torch.abs(input) + self.eps)
        m = torch.exp(self.nac(log_input))
        mul_div = (1 - g) * m
        y = add_sub + mul_div
        return y

    def extra_repr(self):
        return 'in_dim={}, out_dim={}'.format(
            self.in_dim, self.out_dim
        )


class NALU(nn.Module):
    \"\"\"A stack of NALU layers.

    Attributes:
        num_layers: the number of NALU layers.
        in_dim: the size of the input sample.
        hidden_dim: the size of the hidden layers.
        out_dim: the size of the output.
    \"\"\"
    def __init__(self, num_layers, in_dim, hidden_dim, out_dim):
        super().__init__()
        self.num_layers = num_layers
        self.in_dim = in_dim
        self.hidden_dim = hidden_dim
        self.out_dim = out_dim

        layers = []
        for i in range(num_layers):
            layers.append(
                NeuralArithmeticLogicUnitCell(
                    hidden_dim if i > 0 else in_dim,
                    hidden_dim if i < num_layers - 1 else out_dim,
                )
            )
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        out = self.model(x)
        return out


NORMALIZE = True
NUM_LAYERS = 2
HIDDEN_DIM = 2
LEARNING_RATE = 1e-2
NUM_ITERS = 3
RANGE = [5, 10]
ARITHMETIC_FUNCTIONS = {
    'add': lambda x, y: x + y,
    'sub': lambda x, y: x - y,
    'mul': lambda x, y: x * y,
    'div': lambda x, y: x / y,
    'squared': lambda x, y: torch.pow(x, 2),
    'root': lambda x, y: torch.sqrt(x),
}


def generate_data(num_train, num_test, dim, num_sum, fn, support):
    data = torch.FloatTensor(dim).uniform_(*support).unsqueeze_(1)
    X, y = [], []
    for i in range(num_train + num_test):
        idx_a = random.sample(range(dim), num_sum)
        idx_b = random.sample([x for x in range(dim) if x not in idx_a], num_sum)
        a, b = data[idx_a].sum(), data[idx_b].sum()
        X.append([a, b])
        y.append(fn(a, b))
    X = torch.FloatTensor(X)
    y = torch.FloatTensor(y).unsqueeze_(1)
    indices = list(range(num_train + num_test))
    np.random.shuffle(indices)
    X_train, y_train = X[indices[num_test:]], y[indices[num_test:]]
    X_test, y_test = X[indices[:num_test]], y[indices[:num_test]]
    return X_train, y_train, X_test, y_test


def train(model, optimizer, data, target, num_iters):
    for i in range(num_iters):
        out = model(data)
        loss = F.mse_loss(out, target)
        mea = torch.mean(torch.abs(target - out))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if i % 1 == 0:
            print("\\t{}/{}: loss: {:.7f} - mea: {:.7f}".format(
                i+1, num_iters, loss.item(), mea.item())
            )
        record.append(loss.item())


def test(model, data, target):
    with torch.no_grad():
        out = model(data)
        return torch.abs(target - out)


def main():
    results = {}
    for fn_str, fn in ARITHMETIC_FUNCTIONS.items():
        print('[*] Testing function: {}'.format(fn_str))
        results[fn_str] = []

        # dataset
        X_train, y_train, X_test, y_test = generate_data(
            num_train=12, num_test=4,
            dim=20, num_sum=3, fn=fn,
            support=RANGE,
        )
        models = [
            NAC(
                num_layers=NUM_LAYERS,
                in_dim=2,
                hidden_dim=HIDDEN_DIM,
                out_dim=1,
            ),
            NALU(
                num_layers=NUM_LAYERS,
                in_dim=2,
                hidden_dim=HIDDEN_DIM,
                out_dim=1
            ),
        ]

        # others
        for net in models:
            initialize(net)
            print("\\tTraining {}...".format(net.__str__().split("(")[0]))
            optimizer = torch.optim.RMSprop(net.parameters(), lr=LEARNING_RATE)
            train(net, optimizer, X_train, y_train, NUM_ITERS)
            mse = test(net, X_test, y_test).mean().item()
            results[fn_str].append(mse)
    print(models[1])
    return results
"""

NALU_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nfrom torch.nn import init\nfrom torch.nn.parameter import Parameter\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nfrom retrograd.nn import init\nfrom retrograd.nn.parameter import Parameter\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


class SharedUniformFill:
    """``Tensor.uniform_`` of a library drawing from one seeded stream for a tensor that does
    not require grad (the data both runs start from); parameters' initializations draw as
    before (the port loads torch's weights over them)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng
        own = lib.Tensor.uniform_

        def uniform_(tensor, low=0.0, high=1.0, **kwargs):
            if tensor.requires_grad:
                return own(tensor, low, high, **kwargs)
            with lib.no_grad():
                values = rng.uniform(low, high, tuple(tensor.shape))
                return tensor.copy_(lib.tensor(values, dtype=tensor.dtype))

        lib.Tensor.uniform_ = uniform_
        return self

    def __exit__(self, *exc):
        del self.lib.Tensor.uniform_  # the class's own (inherited) method again
        return False


def test_neural_arithmetic_logic_units_train_as_torch(capsys):
    records, logs, results = [], [], []
    initialize = defined_initializer(6506)  # W is computed from uninitialised memory
    for lib in (torch, rg):
        record = []
        random.seed(6506)
        np.random.seed(6506)
        text = NALU_SOURCE if lib is torch else port(NALU_SOURCE, NALU_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        with SharedUniformFill(lib, 6506):
            results.append(names["main"]())
        records.append(record)
        logs.append(capsys.readouterr().out)
    # the log prints float32 losses of thousands to seven decimals: below their precision,
    # so its numbers are compared as numbers
    number = re.compile(r"-?\d+\.\d+")
    assert number.sub("#", logs[1]) == number.sub("#", logs[0])
    np.testing.assert_allclose(
        [float(x) for x in number.findall(logs[1])],
        [float(x) for x in number.findall(logs[0])],
        rtol=1e-5,
    )
    assert "(nac): NeuralAccumulatorCell(in_dim=2, out_dim=1)" in logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)
    assert list(results[1]) == list(results[0])
    for name, errors in results[0].items():
        np.testing.assert_allclose(results[1][name], errors, rtol=1e-4, err_msg=name)
