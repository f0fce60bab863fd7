# ruff: noqa: E501, W291, W293  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
LSTNet, the long- and short-term time-series network.

- laiguokun/LSTNet as written: ``models/LSTNet.py`` (a ``Conv2d(1, hidC, (Ck, m))`` over the
  window, ``torch.squeeze(c, 3)``, a sequence-first ``nn.GRU`` over ``c.permute(2, 0, 1)``,
  the skip GRU over ``c[:, :, -pt * skip:]`` regrouped by ``view``/``permute(2, 0, 3, 1)``
  into ``pt`` steps of ``batch * skip`` sequences, the highway linear autoregression over the
  last ``hw`` steps, ``F.sigmoid`` output); ``utils.py``'s ``Data_utility`` (``np.loadtxt``
  of a CSV file, per-sensor max scaling, windows cut by item assignment ``X[i,:,:] =
  torch.from_numpy(...)``, ``torch.autograd.Variable``, ``torch.randperm``/
  ``torch.LongTensor(range(n))`` batches, the ``normal_std`` and mean-absolute baselines);
  ``Optim.py``'s wrapper (the gradient norm by ``math.pow(param.grad.data.norm(), 2)``, the
  in-place shrinkage, ``Adam``); ``main.py``'s ``train``/``evaluate`` (the summed
  ``nn.L1Loss(size_average=False)``/``nn.MSELoss(size_average=False)`` on rescaled outputs,
  RSE, RAE and the per-sensor correlation in NumPy from ``predict.data.cpu().numpy()``) and
  its driver loop with the printed report.

The lines changed: the ``import`` lines and the gradient lines (``Optim.step`` takes the
gradients: ``param.grad(grads)``, ``grad_replace`` for the shrinkage). Also changed, for
torch 2 as well: ``self.pt`` is ``int(...)`` (Python 3's ``/`` makes a float that ``view``
refuses) and the two ``.data[0]`` of PyTorch 0.3 read ``.item()``; ``main.py``'s argparse
arguments are an ``argparse.Namespace``, the model is not saved, the epoch time not printed.
The weights are torch's (``initialize``); dropout is 0; ``torch.randperm`` draws one shared
stream in both runs.
"""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, params_of, port, run_source

LSTNET_SOURCE = """
# models/LSTNet.py
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self, args, data):
        super(Model, self).__init__()
        self.use_cuda = args.cuda
        self.P = args.window;
        self.m = data.m
        self.hidR = args.hidRNN;
        self.hidC = args.hidCNN;
        self.hidS = args.hidSkip;
        self.Ck = args.CNN_kernel;
        self.skip = args.skip;
        self.pt = int((self.P - self.Ck)/self.skip)
        self.hw = args.highway_window
        self.conv1 = nn.Conv2d(1, self.hidC, kernel_size = (self.Ck, self.m));
        self.GRU1 = nn.GRU(self.hidC, self.hidR);
        self.dropout = nn.Dropout(p = args.dropout);
        if (self.skip > 0):
            self.GRUskip = nn.GRU(self.hidC, self.hidS);
            self.linear1 = nn.Linear(self.hidR + self.skip * self.hidS, self.m);
        else:
            self.linear1 = nn.Linear(self.hidR, self.m);
        if (self.hw > 0):
            self.highway = nn.Linear(self.hw, 1);
        self.output = None;
        if (args.output_fun == 'sigmoid'):
            self.output = F.sigmoid;
        if (args.output_fun == 'tanh'):
            self.output = F.tanh;
 
    def forward(self, x):
        batch_size = x.size(0);
        
        #CNN
        c = x.view(-1, 1, self.P, self.m);
        c = F.relu(self.conv1(c));
        c = self.dropout(c);
        c = torch.squeeze(c, 3);
        
        # RNN 
        r = c.permute(2, 0, 1).contiguous();
        _, r = self.GRU1(r);
        r = self.dropout(torch.squeeze(r,0));

        
        #skip-rnn
        
        if (self.skip > 0):
            s = c[:,:, int(-self.pt * self.skip):].contiguous();
            s = s.view(batch_size, self.hidC, self.pt, self.skip);
            s = s.permute(2,0,3,1).contiguous();
            s = s.view(self.pt, batch_size * self.skip, self.hidC);
            _, s = self.GRUskip(s);
            s = s.view(batch_size, self.skip * self.hidS);
            s = self.dropout(s);
            r = torch.cat((r,s),1);
        
        res = self.linear1(r);
        
        #highway
        if (self.hw > 0):
            z = x[:, -self.hw:, :];
            z = z.permute(0,2,1).contiguous().view(-1, self.hw);
            z = self.highway(z);
            z = z.view(-1,self.m);
            res = res + z;
            
        if (self.output):
            res = self.output(res);
        return res;


# utils.py
import torch
import numpy as np;
from torch.autograd import Variable


def normal_std(x):
    return x.std() * np.sqrt((len(x) - 1.)/(len(x)))

class Data_utility(object):
    # train and valid is the ratio of training set and validation set. test = 1 - train - valid
    def __init__(self, file_name, train, valid, cuda, horizon, window, normalize = 2):
        self.cuda = cuda;
        self.P = window;
        self.h = horizon
        fin = open(file_name);
        self.rawdat = np.loadtxt(fin,delimiter=',');
        self.dat = np.zeros(self.rawdat.shape);
        self.n, self.m = self.dat.shape;
        self.normalize = 2
        self.scale = np.ones(self.m);
        self._normalized(normalize);
        self._split(int(train * self.n), int((train+valid) * self.n), self.n);
        
        self.scale = torch.from_numpy(self.scale).float();
        tmp = self.test[1] * self.scale.expand(self.test[1].size(0), self.m);
            
        if self.cuda:
            self.scale = self.scale.cuda();
        self.scale = Variable(self.scale);
        
        self.rse = normal_std(tmp);
        self.rae = torch.mean(torch.abs(tmp - torch.mean(tmp)));
    
    def _normalized(self, normalize):
        #normalized by the maximum value of entire matrix.
       
        if (normalize == 0):
            self.dat = self.rawdat
            
        if (normalize == 1):
            self.dat = self.rawdat / np.max(self.rawdat);
            
        #normlized by the maximum value of each row(sensor).
        if (normalize == 2):
            for i in range(self.m):
                self.scale[i] = np.max(np.abs(self.rawdat[:,i]));
                self.dat[:,i] = self.rawdat[:,i] / np.max(np.abs(self.rawdat[:,i]));
            
        
    def _split(self, train, valid, test):
        
        train_set = range(self.P+self.h-1, train);
        valid_set = range(train, valid);
        test_set = range(valid, self.n);
        self.train = self._batchify(train_set, self.h);
        self.valid = self._batchify(valid_set, self.h);
        self.test = self._batchify(test_set, self.h);
        
        
    def _batchify(self, idx_set, horizon):
        
        n = len(idx_set);
        X = torch.zeros((n,self.P,self.m));
        Y = torch.zeros((n,self.m));
        
        for i in range(n):
            end = idx_set[i] - self.h + 1;
            start = end - self.P;
            X[i,:,:] = torch.from_numpy(self.dat[start:end, :]);
            Y[i,:] = torch.from_numpy(self.dat[idx_set[i], :]);

        return [X, Y];

    def get_batches(self, inputs, targets, batch_size, shuffle=True):
        length = len(inputs)
        if shuffle:
            index = torch.randperm(length)
        else:
            index = torch.LongTensor(range(length))
        start_idx = 0
        while (start_idx < length):
            end_idx = min(length, start_idx + batch_size)
            excerpt = index[start_idx:end_idx]
            X = inputs[excerpt]; Y = targets[excerpt];
            if (self.cuda):
                X = X.cuda();
                Y = Y.cuda();  
            yield Variable(X), Variable(Y);
            start_idx += batch_size


# Optim.py
import math
import torch.optim as optim

class Optim(object):

    def _makeOptimizer(self):
        if self.method == 'sgd':
            self.optimizer = optim.SGD(self.params, lr=self.lr)
        elif self.method == 'adagrad':
            self.optimizer = optim.Adagrad(self.params, lr=self.lr)
        elif self.method == 'adadelta':
            self.optimizer = optim.Adadelta(self.params, lr=self.lr)
        elif self.method == 'adam':
            self.optimizer = optim.Adam(self.params, lr=self.lr)
        else:
            raise RuntimeError("Invalid optim method: " + self.method)

    def __init__(self, params, method, lr, max_grad_norm, lr_decay=1, start_decay_at=None):
        self.params = list(params)  # careful: params may be a generator
        self.last_ppl = None
        self.lr = lr
        self.max_grad_norm = max_grad_norm
        self.method = method
        self.lr_decay = lr_decay
        self.start_decay_at = start_decay_at
        self.start_decay = False

        self._makeOptimizer()

    def step(self):
        # Compute gradients norm.
        grad_norm = 0
        for param in self.params:
            grad_norm += math.pow(param.grad.data.norm(), 2)

        grad_norm = math.sqrt(grad_norm)
        if grad_norm > 0:
            shrinkage = self.max_grad_norm / grad_norm
        else:
            shrinkage = 1.

        for param in self.params:
            if shrinkage < 1:
                param.grad.data.mul_(shrinkage)

        self.optimizer.step()
        return grad_norm

    # decay learning rate if val perf does not improve or we hit the start_decay_at limit
    def updateLearningRate(self, ppl, epoch):
        if self.start_decay_at is not None and epoch >= self.start_decay_at:
            self.start_decay = True
        if self.last_ppl is not None and ppl > self.last_ppl:
            self.start_decay = True

        if self.start_decay:
            self.lr = self.lr * self.lr_decay
            print("Decaying learning rate to %g" % self.lr)
        #only decay for one epoch
        self.start_decay = False

        self.last_ppl = ppl

        self._makeOptimizer()


# main.py
def evaluate(data, X, Y, model, evaluateL2, evaluateL1, batch_size):
    model.eval();
    total_loss = 0;
    total_loss_l1 = 0;
    n_samples = 0;
    predict = None;
    test = None;
    
    for X, Y in data.get_batches(X, Y, batch_size, False):
        output = model(X);
        if predict is None:
            predict = output;
            test = Y;
        else:
            predict = torch.cat((predict,output));
            test = torch.cat((test, Y));
        
        scale = data.scale.expand(output.size(0), data.m)
        total_loss += evaluateL2(output * scale, Y * scale).item()
        total_loss_l1 += evaluateL1(output * scale, Y * scale).item()
        n_samples += (output.size(0) * data.m);
    rse = math.sqrt(total_loss / n_samples)/data.rse
    rae = (total_loss_l1/n_samples)/data.rae
    
    predict = predict.data.cpu().numpy();
    Ytest = test.data.cpu().numpy();
    sigma_p = (predict).std(axis = 0);
    sigma_g = (Ytest).std(axis = 0);
    mean_p = predict.mean(axis = 0)
    mean_g = Ytest.mean(axis = 0)
    index = (sigma_g!=0);
    correlation = ((predict - mean_p) * (Ytest - mean_g)).mean(axis = 0)/(sigma_p * sigma_g);
    correlation = (correlation[index]).mean();
    return rse, rae, correlation;

def train(data, X, Y, model, criterion, optim, batch_size):
    model.train();
    total_loss = 0;
    n_samples = 0;
    for X, Y in data.get_batches(X, Y, batch_size, True):
        model.zero_grad();
        output = model(X);
        scale = data.scale.expand(output.size(0), data.m)
        loss = criterion(output * scale, Y * scale);
        loss.backward();
        grad_norm = optim.step();
        total_loss += loss.item();
        n_samples += (output.size(0) * data.m);
    return total_loss / n_samples

# (main.py's driver, its argparse defaults scaled down and dropout 0)
torch.manual_seed(args.seed)
Data = Data_utility(args.data, 0.6, 0.2, args.cuda, args.horizon, args.window, args.normalize);
print(Data.rse);

model = Model(args, Data);
initialize(model)

nParams = sum([p.nelement() for p in model.parameters()])
print('* number of parameters: %d' % nParams)

if args.L1Loss:
    criterion = nn.L1Loss(size_average=False);
else:
    criterion = nn.MSELoss(size_average=False);
evaluateL2 = nn.MSELoss(size_average=False);
evaluateL1 = nn.L1Loss(size_average=False)

best_val = 10000000;
optim = Optim(
    model.parameters(), args.optim, args.lr, args.clip,
)

print('begin training');
for epoch in range(1, args.epochs+1):
    train_loss = train(Data, Data.train[0], Data.train[1], model, criterion, optim, args.batch_size)
    val_loss, val_rae, val_corr = evaluate(Data, Data.valid[0], Data.valid[1], model, evaluateL2, evaluateL1, args.batch_size);
    print('| end of epoch {:3d} | train_loss {:5.4f} | valid rse {:5.4f} | valid rae {:5.4f} | valid corr  {:5.4f}'.format(epoch, train_loss, val_loss, val_rae, val_corr))
    record.append([train_loss, float(val_loss), float(val_rae), float(val_corr)])
    record.append(params_of(model))
test_acc, test_rae, test_corr  = evaluate(Data, Data.test[0], Data.test[1], model, evaluateL2, evaluateL1, args.batch_size);
print ("test rse {:5.4f} | test rae {:5.4f} | test corr {:5.4f}".format(test_acc, test_rae, test_corr))
record.append([float(test_acc), float(test_rae), float(test_corr)])
"""

LSTNET_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    ("import torch\nimport numpy as np;\n", "import retrograd as torch\nimport numpy as np;\n"),
    ("import torch.optim as optim\n", "import retrograd.optim as optim\n"),
    ("    def step(self):\n", "    def step(self, grads):\n"),
    ("math.pow(param.grad.data.norm(), 2)", "math.pow(param.grad(grads).data.norm(), 2)"),
    (
        "                param.grad.data.mul_(shrinkage)\n",
        "                param.grad_replace(grads, param.grad(grads) * shrinkage)\n",
    ),
    ("        self.optimizer.step()\n", "        self.optimizer.step(grads)\n"),
    (
        "        loss.backward();\n        grad_norm = optim.step();\n",
        "        grads = loss.backward();\n        grad_norm = optim.step(grads);\n",
    ),
]


def write_sensors(path, seed: int, n: int = 100) -> str:
    """Three positive sensor series (daily and half-daily cycles) as LSTNet's CSV files."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)[:, None]
    values = 5.0 + np.sin(2 * np.pi * t / 12 + np.array([0.0, 1.0, 2.0])) * np.array(
        [2.0, 1.0, 3.0]
    )
    values += np.cos(2 * np.pi * t / 6) + 0.3 * rng.standard_normal((n, 3))
    np.savetxt(path, values, delimiter=",")
    return str(path)


@pytest.mark.parametrize("output_fun", ["sigmoid", "tanh"])
def test_lstnet_trains_and_reports_as_torch(tmp_path, capsys, monkeypatch, output_fun):
    data = write_sensors(tmp_path / "sensors.txt", 325)
    args = argparse.Namespace(
        data=data, model="LSTNet", hidCNN=8, hidRNN=8, window=24, CNN_kernel=6, highway_window=6,
        clip=1.0, epochs=2, batch_size=16, dropout=0.0, seed=54321, cuda=False, optim="adam",
        lr=0.01, horizon=3, skip=6, hidSkip=4, L1Loss=True, normalize=2, output_fun=output_fun,
    )  # fmt: skip
    initialize = initializer()
    records, logs = [], []
    for lib in (torch, rg):
        rng = np.random.default_rng(3250)
        monkeypatch.setattr(
            lib,
            "randperm",
            lambda n, *a, lib=lib, rng=rng, **k: lib.tensor(rng.permutation(n), dtype=lib.int64),
        )
        record = []
        text = (
            LSTNET_SOURCE
            if lib is torch
            else port(LSTNET_SOURCE, LSTNET_STEPS).replace("from torch.", "from retrograd.")
        )
        with torch.random.fork_rng(), SharedDraws(lib, 3251):
            run_source(
                text, lib, record=record, args=args, initialize=initialize, params_of=params_of
            )
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert logs[1] == logs[0]
    assert logs[0].startswith("tensor(") and "* number of parameters: " in logs[0]
    assert len(theirs) == 2 * args.epochs + 1
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
