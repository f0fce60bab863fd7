# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- Baseline++ as wyharveychen/CloserLookFewShot writes it (``backbone.py``: ``init_layer``
  by ``L.weight.data.normal_(0, math.sqrt(2.0 / float(n)))`` and ``fill_``, ``distLinear``
  applying ``WeightNorm.apply(self.L, 'weight', dim=0)`` from
  ``torch.nn.utils.weight_norm`` and dividing by ``torch.norm(x, p=2, dim=1).unsqueeze(1)
  .expand_as(x)``, ``Flatten``, ``ConvBlock`` with its ``parametrized_layers`` list,
  ``ConvNetS`` reading ``x[:, 0:1, :, :]``; ``methods/baselinetrain.py``'s ``BaselineTrain``
  and ``train_loop`` with its ``'Epoch {:d} | Batch {:d}/{:d} | Loss {:f}'`` log;
  ``methods/meta_template.py``'s ``parse_feature``; ``methods/baselinefinetune.py``'s
  ``set_forward_adaptation``: a new ``distLinear`` fitted on the support features by SGD with
  ``momentum=0.9, dampening=0.9, weight_decay=0.001`` over ``np.random.permutation`` batches
  picked by ``torch.from_numpy`` indices, ``y_support`` from ``np.repeat(range(n_way),
  n_support)``), small (three classes of 8x8 images, a 3-block ``ConvNetS``), trained, then
  meta-tested on one episode of saved features (as ``test.py`` reads the file
  ``save_features.py`` wrote). ``WeightNorm`` could not be imported. The
  adaptation's classifier is given torch's initial weights by an added ``initialize`` line,
  and ``.cuda()`` is left out.

The lines changed: the ``import`` lines and the gradient lines (``loss.backward()`` returns
the gradients, ``step`` takes them).
"""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, runs_with_draws


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


CLOSER_LOOK_SOURCE = """
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.autograd import Variable
from torch.nn.utils.weight_norm import WeightNorm


# -- backbone.py --
# Basic ResNet model

def init_layer(L):
    # Initialization using fan-in
    if isinstance(L, nn.Conv2d):
        n = L.kernel_size[0]*L.kernel_size[1]*L.out_channels
        L.weight.data.normal_(0,math.sqrt(2.0/float(n)))
    elif isinstance(L, nn.BatchNorm2d):
        L.weight.data.fill_(1)
        L.bias.data.fill_(0)

class distLinear(nn.Module):
    def __init__(self, indim, outdim):
        super(distLinear, self).__init__()
        self.L = nn.Linear( indim, outdim, bias = False)
        self.class_wise_learnable_norm = True  #See the issue#4&8 in the github
        if self.class_wise_learnable_norm:
            WeightNorm.apply(self.L, 'weight', dim=0) #split the weight update component to direction and norm

        if outdim <=200:
            self.scale_factor = 2; #a fixed scale factor to scale the output of cos value into a reasonably large input for softmax, for to reproduce the result of CUB with ResNet10, use 4. see the issue#31 in the github
        else:
            self.scale_factor = 10; #in omniglot, a larger scale factor is required to handle >1000 output classes.

    def forward(self, x):
        x_norm = torch.norm(x, p=2, dim =1).unsqueeze(1).expand_as(x)
        x_normalized = x.div(x_norm+ 0.00001)
        if not self.class_wise_learnable_norm:
            L_norm = torch.norm(self.L.weight.data, p=2, dim =1).unsqueeze(1).expand_as(self.L.weight.data)
            self.L.weight.data = self.L.weight.data.div(L_norm + 0.00001)
        cos_dist = self.L(x_normalized) #matrix product by forward function, but when using WeightNorm, this also multiply the cosine distance by a class-wise learnable norm, see the issue#4&8 in the github
        scores = self.scale_factor* (cos_dist)

        return scores

class Flatten(nn.Module):
    def __init__(self):
        super(Flatten, self).__init__()

    def forward(self, x):
        return x.view(x.size(0), -1)

class ConvBlock(nn.Module):
    maml = False #Default
    def __init__(self, indim, outdim, pool = True, padding = 1):
        super(ConvBlock, self).__init__()
        self.indim  = indim
        self.outdim = outdim
        self.C      = nn.Conv2d(indim, outdim, 3, padding= padding)
        self.BN     = nn.BatchNorm2d(outdim)
        self.relu   = nn.ReLU(inplace=True)

        self.parametrized_layers = [self.C, self.BN, self.relu]
        if pool:
            self.pool   = nn.MaxPool2d(2)
            self.parametrized_layers.append(self.pool)

        for layer in self.parametrized_layers:
            init_layer(layer)

        self.trunk = nn.Sequential(*self.parametrized_layers)


    def forward(self,x):
        out = self.trunk(x)
        return out

class ConvNetS(nn.Module): #For omniglot, only 1 input channel, output dim is 64
    def __init__(self, depth, flatten = True):
        super(ConvNetS,self).__init__()
        trunk = []
        for i in range(depth):
            indim = 1 if i == 0 else 64
            outdim = 64
            B = ConvBlock(indim, outdim, pool = ( i <4 ) ) #only pooling for fist 4 layers
            trunk.append(B)

        if flatten:
            trunk.append(Flatten())

        #trunk.insert(0,ConvBlock(1,64,pool=False))
        self.trunk = nn.Sequential(*trunk)
        self.final_feat_dim = 64

    def forward(self,x):
        out = x[:,0:1,:,:] #only use the first dimension
        out = self.trunk(out)
        return out

def Conv4S():
    return ConvNetS(4)

def Conv3S():  # (for the 8x8 images here: three pooling blocks make them 1x1, as Conv4S does 16x16 ones)
    return ConvNetS(3)


# -- methods/baselinetrain.py --
class BaselineTrain(nn.Module):
    def __init__(self, model_func, num_class, loss_type = 'softmax'):
        super(BaselineTrain, self).__init__()
        self.feature    = model_func()
        if loss_type == 'softmax':
            self.classifier = nn.Linear(self.feature.final_feat_dim, num_class)
            self.classifier.bias.data.fill_(0)
        elif loss_type == 'dist': #Baseline ++
            self.classifier = distLinear(self.feature.final_feat_dim, num_class)
        self.loss_type = loss_type  #'softmax' #'dist'
        self.num_class = num_class
        self.loss_fn = nn.CrossEntropyLoss()
        self.DBval = False; #only set True for CUB dataset, see issue #31

    def forward(self,x):
        x    = Variable(x)
        out  = self.feature.forward(x)
        scores  = self.classifier.forward(out)
        return scores

    def forward_loss(self, x, y):
        scores = self.forward(x)
        y = Variable(y)
        return self.loss_fn(scores, y )

    def train_loop(self, epoch, train_loader, optimizer):
        print_freq = 10
        avg_loss=0

        for i, (x,y) in enumerate(train_loader):
            optimizer.zero_grad()
            loss = self.forward_loss(x, y)
            loss.backward()
            optimizer.step()

            avg_loss = avg_loss+loss.item()#data[0]
            record.append(loss.item())

            if i % print_freq==0:
                #print(optimizer.state_dict()['param_groups'][0]['lr'])
                print('Epoch {:d} | Batch {:d}/{:d} | Loss {:f}'.format(epoch, i, len(train_loader), avg_loss/float(i+1)  ))


# -- methods/meta_template.py and methods/baselinefinetune.py --
class MetaTemplate(nn.Module):
    def __init__(self, model_func, n_way, n_support, change_way = True):
        super(MetaTemplate, self).__init__()
        self.n_way      = n_way
        self.n_support  = n_support
        self.n_query    = -1 #(change depends on input)
        self.feature    = model_func()
        self.feat_dim   = self.feature.final_feat_dim
        self.change_way = change_way  #some methods allow different_way classification during training and test

    def parse_feature(self,x,is_feature):
        x    = Variable(x)
        if is_feature:
            z_all = x
        else:
            x           = x.contiguous().view( self.n_way * (self.n_support + self.n_query), *x.size()[2:])
            z_all       = self.feature.forward(x)
            z_all       = z_all.view( self.n_way, self.n_support + self.n_query, -1)
        z_support   = z_all[:, :self.n_support]
        z_query     = z_all[:, self.n_support:]

        return z_support, z_query


class BaselineFinetune(MetaTemplate):
    def __init__(self, model_func,  n_way, n_support, loss_type = "softmax"):
        super(BaselineFinetune, self).__init__( model_func,  n_way, n_support)
        self.loss_type = loss_type

    def set_forward(self,x,is_feature = True):
        return self.set_forward_adaptation(x,is_feature); #Baseline always do adaptation

    def set_forward_adaptation(self,x,is_feature = True):
        assert is_feature == True, 'Baseline only support testing with feature'
        z_support, z_query  = self.parse_feature(x,is_feature)

        z_support   = z_support.contiguous().view(self.n_way* self.n_support, -1 )
        z_query     = z_query.contiguous().view(self.n_way* self.n_query, -1 )

        y_support = torch.from_numpy(np.repeat(range( self.n_way ), self.n_support ))
        y_support = Variable(y_support)

        if self.loss_type == 'softmax':
            linear_clf = nn.Linear(self.feat_dim, self.n_way)
        elif self.loss_type == 'dist':
            linear_clf = distLinear(self.feat_dim, self.n_way)
        initialize(linear_clf)

        set_optimizer = torch.optim.SGD(linear_clf.parameters(), lr = 0.01, momentum=0.9, dampening=0.9, weight_decay=0.001)

        loss_function = nn.CrossEntropyLoss()

        batch_size = 4
        support_size = self.n_way* self.n_support
        for epoch in range(100):
            rand_id = np.random.permutation(support_size)
            for i in range(0, support_size , batch_size):
                set_optimizer.zero_grad()
                selected_id = torch.from_numpy( rand_id[i: min(i+batch_size, support_size) ])
                z_batch = z_support[selected_id]
                y_batch = y_support[selected_id]
                scores = linear_clf(z_batch)
                loss = loss_function(scores,y_batch)
                loss.backward()
                set_optimizer.step()
        record.append(params_of(linear_clf))

        scores = linear_clf(z_query)
        return scores


# -- train.py's Baseline++ training, then test.py's meta-test on one episode of saved features, made small --
model = BaselineTrain(Conv3S, 3, loss_type = 'dist')
initialize(model)
optimizer = torch.optim.Adam(model.parameters())
train_loader = [(torch.tensor(x), torch.tensor(y)) for x, y in batches]
for epoch in range(2):
    model.train()
    model.train_loop(epoch, train_loader, optimizer)
record.append(params_of(model))

# (test.py reads the features save_features.py wrote: here, one saved episode)
features = torch.tensor(saved_features)
n_way, n_support = 3, 2
finetune = BaselineFinetune(Conv3S, n_way, n_support, loss_type = 'dist')
finetune.n_query = features.size(1) - n_support
scores = finetune.set_forward(features)
pred = scores.data.cpu().numpy().argmax(axis = 1)
y = np.repeat(range( n_way ), finetune.n_query )
acc = np.mean(pred == y)*100
record.append(scores.detach().numpy())
record.append(acc)
"""

CLOSER_LOOK_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\nfrom torch.autograd import Variable\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\nfrom retrograd.autograd import Variable\n",
    ),
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
    (
        "                loss.backward()\n                set_optimizer.step()\n",
        "                grads = loss.backward()\n                set_optimizer.step(grads)\n",
    ),
]


def test_closer_look_baseline_plus_plus_trains_and_adapts_as_torch(capsys):
    rng = np.random.default_rng(9701)
    batches = [
        (rng.standard_normal((6, 3, 8, 8)).astype(np.float32), rng.integers(0, 3, 6))
        for _ in range(2)
    ]
    saved_features = np.abs(rng.standard_normal((3, 4, 64))).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # (WeightNorm.apply's, in both)
        (theirs, ours), logs = runs_with_draws(
            CLOSER_LOOK_SOURCE,
            CLOSER_LOOK_STEPS,
            capsys,
            9701,
            batches=batches,
            saved_features=saved_features,
            initialize=initializer(),
            params_of=params_of,
        )
    assert len(theirs) == 2 * 2 + 1 + 1 + 2
    # the convolutions' biases feed batch norms, which subtract them again: their true
    # gradient is zero, so Adam's steps on them follow the rounding noise
    conv_biases = [f"0.feature.trunk.{i}.C.bias" for i in range(3)]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5, skip=conv_biases)
    assert logs[0].count("Epoch") == 2
    assert logs[0].splitlines()[0][:30] == logs[1].splitlines()[0][:30]


def test_weight_norm_hook_class_applies_and_removes_as_torch():
    # ``from torch.nn.utils.weight_norm import WeightNorm`` raised ImportError (the path was
    # an alias of ``nn.utils``, which has only the functions)
    from torch.nn.utils.weight_norm import WeightNorm as TorchWeightNorm

    from retrograd.nn.utils.weight_norm import WeightNorm as RgWeightNorm

    rng = np.random.default_rng(9702)
    weight = rng.standard_normal((3, 4)).astype(np.float32)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    results = []
    for lib, hook in ((torch, TorchWeightNorm), (rg, RgWeightNorm)):
        layer = lib.nn.Linear(4, 3, bias=False)
        layer.load_state_dict({"weight": lib.tensor(weight)})
        with pytest.warns(FutureWarning, match="weight_norm` is deprecated"):
            fn = hook.apply(layer, "weight", dim=None)
        assert sorted(name for name, _ in layer.named_parameters()) == ["weight_g", "weight_v"]
        assert tuple(layer.weight_g.shape) == ()
        with lib.no_grad():
            layer.weight_g.mul_(2.0)
        out = layer(lib.tensor(x)).detach().numpy().copy()
        fn.remove(layer)
        results.append((out, layer.weight.detach().numpy().copy()))
        assert [name for name, _ in layer.named_parameters()] == ["weight"]
    for mine, reference in zip(results[1], results[0]):
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-6)
    with pytest.raises(rg.InvalidArgumentError, match="Cannot register two weight_norm"):
        layer = rg.nn.Linear(2, 2)
        with pytest.warns(FutureWarning):
            RgWeightNorm.apply(layer, "weight", 0)
            RgWeightNorm.apply(layer, "weight", 0)
