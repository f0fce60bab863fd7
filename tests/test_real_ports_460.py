# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch meta-learning programs ported to retrograd (the harness:
``tests/real_ports.py``).

- MAML of dragen1860/MAML-Pytorch (``learner.py`` and ``meta.py`` as written): a ``Learner``
  whose weights are an ``nn.ParameterList`` walked by a config of ``('conv2d', [...])``
  pairs (``name is 'conv2d'``), its batch-norm running statistics held as
  ``nn.Parameter(..., requires_grad=False)`` and updated by ``F.batch_norm(x, running_mean,
  running_var, weight=w, bias=b, training=bn_training)``, a ``forward(x, vars=None)`` over a
  list of fast weights, ``parameters()`` overridden to return the ``ParameterList``; ``Meta``
  taking ``torch.autograd.grad(loss, self.net.parameters())`` then ``torch.autograd.grad(loss,
  fast_weights)`` (gradients with respect to tensors of the graph, without ``create_graph``:
  first order, the meta-gradient flowing through ``p - update_lr * g`` only), the query losses
  summed into a list of ``0`` under ``torch.no_grad()``, ``torch.eq(pred_q, y_qry[i]).sum()
  .item()``, Adam on ``losses_q[-1] / task_num``; ``finetunning`` on a ``deepcopy`` of the net.
  The driver is ``omniglot_train.py``'s (its config with 8 channels in place of 64,
  ``filter(lambda x: x.requires_grad, maml.parameters())``); the Omniglot loader is replaced
  by synthetic 5-way tasks of 28x28 images with the same ``next('train'|'test')`` interface.

Both runs start from torch's weights (the Learner's kaiming draws are torch's).
"""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tests.real_ports import (
    assert_records_agree,
    global_streams_restored,  # noqa: F401  (a fixture)
    initializer,
    port,
    ported_imports,
    run_source,
    state_of,
)

import retrograd as rg

LEARNER_SOURCE = """
import  torch
from    torch import nn
from    torch.nn import functional as F
import  numpy as np



class Learner(nn.Module):
    \"\"\"

    \"\"\"

    def __init__(self, config, imgc, imgsz):
        \"\"\"

        :param config: network config file, type:list of (string, list)
        :param imgc: 1 or 3
        :param imgsz:  28 or 84
        \"\"\"
        super(Learner, self).__init__()


        self.config = config

        # this dict contains all tensors needed to be optimized
        self.vars = nn.ParameterList()
        # running_mean and running_var
        self.vars_bn = nn.ParameterList()

        for i, (name, param) in enumerate(self.config):
            if name is 'conv2d':
                # [ch_out, ch_in, kernelsz, kernelsz]
                w = nn.Parameter(torch.ones(*param[:4]))
                # gain=1 according to cbfin's implementation
                torch.nn.init.kaiming_normal_(w)
                self.vars.append(w)
                # [ch_out]
                self.vars.append(nn.Parameter(torch.zeros(param[0])))

            elif name is 'convt2d':
                # [ch_in, ch_out, kernelsz, kernelsz, stride, padding]
                w = nn.Parameter(torch.ones(*param[:4]))
                # gain=1 according to cbfin's implementation
                torch.nn.init.kaiming_normal_(w)
                self.vars.append(w)
                # [ch_in, ch_out]
                self.vars.append(nn.Parameter(torch.zeros(param[1])))

            elif name is 'linear':
                # [ch_out, ch_in]
                w = nn.Parameter(torch.ones(*param))
                # gain=1 according to cbfinn's implementation
                torch.nn.init.kaiming_normal_(w)
                self.vars.append(w)
                # [ch_out]
                self.vars.append(nn.Parameter(torch.zeros(param[0])))

            elif name is 'bn':
                # [ch_out]
                w = nn.Parameter(torch.ones(param[0]))
                self.vars.append(w)
                # [ch_out]
                self.vars.append(nn.Parameter(torch.zeros(param[0])))

                # must set requires_grad=False
                running_mean = nn.Parameter(torch.zeros(param[0]), requires_grad=False)
                running_var = nn.Parameter(torch.ones(param[0]), requires_grad=False)
                self.vars_bn.extend([running_mean, running_var])


            elif name in ['tanh', 'relu', 'upsample', 'avg_pool2d', 'max_pool2d',
                          'flatten', 'reshape', 'leakyrelu', 'sigmoid']:
                continue
            else:
                raise NotImplementedError






    def extra_repr(self):
        info = ''

        for name, param in self.config:
            if name is 'conv2d':
                tmp = 'conv2d:(ch_in:%d, ch_out:%d, k:%dx%d, stride:%d, padding:%d)'\\
                      %(param[1], param[0], param[2], param[3], param[4], param[5],)
                info += tmp + '\\n'

            elif name is 'convt2d':
                tmp = 'convTranspose2d:(ch_in:%d, ch_out:%d, k:%dx%d, stride:%d, padding:%d)'\\
                      %(param[0], param[1], param[2], param[3], param[4], param[5],)
                info += tmp + '\\n'

            elif name is 'linear':
                tmp = 'linear:(in:%d, out:%d)'%(param[1], param[0])
                info += tmp + '\\n'

            elif name is 'leakyrelu':
                tmp = 'leakyrelu:(slope:%f)'%(param[0])
                info += tmp + '\\n'


            elif name is 'avg_pool2d':
                tmp = 'avg_pool2d:(k:%d, stride:%d, padding:%d)'%(param[0], param[1], param[2])
                info += tmp + '\\n'
            elif name is 'max_pool2d':
                tmp = 'max_pool2d:(k:%d, stride:%d, padding:%d)'%(param[0], param[1], param[2])
                info += tmp + '\\n'
            elif name in ['flatten', 'tanh', 'relu', 'upsample', 'reshape', 'sigmoid', 'use_logits', 'bn']:
                tmp = name + ':' + str(tuple(param))
                info += tmp + '\\n'
            else:
                raise NotImplementedError

        return info



    def forward(self, x, vars=None, bn_training=True):
        \"\"\"
        This function can be called by finetunning, however, in finetunning, we dont wish to update
        running_mean/running_var. Thought weights/bias of bn is updated, it has been separated by fast_weights.
        Indeed, to not update running_mean/running_var, we need set update_bn_statistics=False
        but weight/bias will be updated and not dirty initial theta parameters via fast_weiths.
        :param x: [b, 1, 28, 28]
        :param vars:
        :param bn_training: set False to not update
        :return: x, loss, likelihood, kld
        \"\"\"

        if vars is None:
            vars = self.vars

        idx = 0
        bn_idx = 0

        for name, param in self.config:
            if name is 'conv2d':
                w, b = vars[idx], vars[idx + 1]
                # remember to keep synchrozied of forward_encoder and forward_decoder!
                x = F.conv2d(x, w, b, stride=param[4], padding=param[5])
                idx += 2
                # print(name, param, '\\tout:', x.shape)
            elif name is 'convt2d':
                w, b = vars[idx], vars[idx + 1]
                # remember to keep synchrozied of forward_encoder and forward_decoder!
                x = F.conv_transpose2d(x, w, b, stride=param[4], padding=param[5])
                idx += 2
                # print(name, param, '\\tout:', x.shape)
            elif name is 'linear':
                w, b = vars[idx], vars[idx + 1]
                x = F.linear(x, w, b)
                idx += 2
                # print('forward:', idx, x.norm().item())
            elif name is 'bn':
                w, b = vars[idx], vars[idx + 1]
                running_mean, running_var = self.vars_bn[bn_idx], self.vars_bn[bn_idx+1]
                x = F.batch_norm(x, running_mean, running_var, weight=w, bias=b, training=bn_training)
                idx += 2
                bn_idx += 2

            elif name is 'flatten':
                # print(x.shape)
                x = x.view(x.size(0), -1)
            elif name is 'reshape':
                # [b, 8] => [b, 2, 2, 2]
                x = x.view(x.size(0), *param)
            elif name is 'relu':
                x = F.relu(x, inplace=param[0])
            elif name is 'leakyrelu':
                x = F.leaky_relu(x, negative_slope=param[0], inplace=param[1])
            elif name is 'tanh':
                x = F.tanh(x)
            elif name is 'sigmoid':
                x = torch.sigmoid(x)
            elif name is 'upsample':
                x = F.upsample_nearest(x, scale_factor=param[0])
            elif name is 'max_pool2d':
                x = F.max_pool2d(x, param[0], param[1], param[2])
            elif name is 'avg_pool2d':
                x = F.avg_pool2d(x, param[0], param[1], param[2])

            else:
                raise NotImplementedError

        # make sure variable is used properly
        assert idx == len(vars)
        assert bn_idx == len(self.vars_bn)


        return x


    def zero_grad(self, vars=None):
        \"\"\"

        :param vars:
        :return:
        \"\"\"
        with torch.no_grad():
            if vars is None:
                for p in self.vars:
                    if p.grad is not None:
                        p.grad.zero_()
            else:
                for p in vars:
                    if p.grad is not None:
                        p.grad.zero_()

    def parameters(self):
        \"\"\"
        override this function since initial parameters will return with a generator.
        :return:
        \"\"\"
        return self.vars
"""

META_SOURCE = """
import  torch
from    torch import nn
from    torch import optim
from    torch.nn import functional as F
from    torch.utils.data import TensorDataset, DataLoader
from    torch import optim
import  numpy as np

from    copy import deepcopy



class Meta(nn.Module):
    \"\"\"
    Meta Learner
    \"\"\"
    def __init__(self, args, config):
        \"\"\"

        :param args:
        \"\"\"
        super(Meta, self).__init__()

        self.update_lr = args.update_lr
        self.meta_lr = args.meta_lr
        self.n_way = args.n_way
        self.k_spt = args.k_spt
        self.k_qry = args.k_qry
        self.task_num = args.task_num
        self.update_step = args.update_step
        self.update_step_test = args.update_step_test


        self.net = Learner(config, args.imgc, args.imgsz)
        self.meta_optim = optim.Adam(self.net.parameters(), lr=self.meta_lr)




    def clip_grad_by_norm_(self, grad, max_norm):
        \"\"\"
        in-place gradient clipping.
        :param grad: list of gradients
        :param max_norm: maximum norm allowable
        :return:
        \"\"\"

        total_norm = 0
        counter = 0
        for g in grad:
            param_norm = g.data.norm(2)
            total_norm += param_norm.item() ** 2
            counter += 1
        total_norm = total_norm ** (1. / 2)

        clip_coef = max_norm / (total_norm + 1e-6)
        if clip_coef < 1:
            for g in grad:
                g.data.mul_(clip_coef)

        return total_norm/counter


    def forward(self, x_spt, y_spt, x_qry, y_qry):
        \"\"\"

        :param x_spt:   [b, setsz, c_, h, w]
        :param y_spt:   [b, setsz]
        :param x_qry:   [b, querysz, c_, h, w]
        :param y_qry:   [b, querysz]
        :return:
        \"\"\"
        task_num, setsz, c_, h, w = x_spt.size()
        querysz = x_qry.size(1)

        losses_q = [0 for _ in range(self.update_step + 1)]  # losses_q[i], i is tasks idx
        corrects = [0 for _ in range(self.update_step + 1)]


        for i in range(task_num):

            # 1. run the i-th task and compute loss for k=0
            logits = self.net(x_spt[i], vars=None, bn_training=True)
            loss = F.cross_entropy(logits, y_spt[i])
            grad = torch.autograd.grad(loss, self.net.parameters())
            fast_weights = list(map(lambda p: p[1] - self.update_lr * p[0], zip(grad, self.net.parameters())))

            # this is the loss and accuracy before first update
            with torch.no_grad():
                # [setsz, nway]
                logits_q = self.net(x_qry[i], self.net.parameters(), bn_training=True)
                loss_q = F.cross_entropy(logits_q, y_qry[i])
                losses_q[0] += loss_q

                pred_q = F.softmax(logits_q, dim=1).argmax(dim=1)
                correct = torch.eq(pred_q, y_qry[i]).sum().item()
                corrects[0] = corrects[0] + correct

            # this is the loss and accuracy after the first update
            with torch.no_grad():
                # [setsz, nway]
                logits_q = self.net(x_qry[i], fast_weights, bn_training=True)
                loss_q = F.cross_entropy(logits_q, y_qry[i])
                losses_q[1] += loss_q
                # [setsz]
                pred_q = F.softmax(logits_q, dim=1).argmax(dim=1)
                correct = torch.eq(pred_q, y_qry[i]).sum().item()
                corrects[1] = corrects[1] + correct

            for k in range(1, self.update_step):
                # 1. run the i-th task and compute loss for k=1~K-1
                logits = self.net(x_spt[i], fast_weights, bn_training=True)
                loss = F.cross_entropy(logits, y_spt[i])
                # 2. compute grad on theta_pi
                grad = torch.autograd.grad(loss, fast_weights)
                # 3. theta_pi = theta_pi - train_lr * grad
                fast_weights = list(map(lambda p: p[1] - self.update_lr * p[0], zip(grad, fast_weights)))

                logits_q = self.net(x_qry[i], fast_weights, bn_training=True)
                # loss_q will be overwritten and just keep the loss_q on last update step.
                loss_q = F.cross_entropy(logits_q, y_qry[i])
                losses_q[k + 1] += loss_q

                with torch.no_grad():
                    pred_q = F.softmax(logits_q, dim=1).argmax(dim=1)
                    correct = torch.eq(pred_q, y_qry[i]).sum().item()  # convert to numpy
                    corrects[k + 1] = corrects[k + 1] + correct



        # end of all tasks
        # sum over all losses on query set across all tasks
        loss_q = losses_q[-1] / task_num

        # optimize theta parameters
        self.meta_optim.zero_grad()
        loss_q.backward()
        # print('meta update')
        # for p in self.net.parameters()[:5]:
        # \tprint(torch.norm(p).item())
        self.meta_optim.step()


        accs = np.array(corrects) / (querysz * task_num)

        return accs


    def finetunning(self, x_spt, y_spt, x_qry, y_qry):
        \"\"\"

        :param x_spt:   [setsz, c_, h, w]
        :param y_spt:   [setsz]
        :param x_qry:   [querysz, c_, h, w]
        :param y_qry:   [querysz]
        :return:
        \"\"\"
        assert len(x_spt.shape) == 4

        querysz = x_qry.size(0)

        corrects = [0 for _ in range(self.update_step_test + 1)]

        # in order to not ruin the state of running_mean/variance and bn_weight/bias
        # we finetunning on the copied model instead of self.net
        net = deepcopy(self.net)

        # 1. run the i-th task and compute loss for k=0
        logits = net(x_spt)
        loss = F.cross_entropy(logits, y_spt)
        grad = torch.autograd.grad(loss, net.parameters())
        fast_weights = list(map(lambda p: p[1] - self.update_lr * p[0], zip(grad, net.parameters())))

        # this is the loss and accuracy before first update
        with torch.no_grad():
            # [setsz, nway]
            logits_q = net(x_qry, net.parameters(), bn_training=True)
            # [setsz]
            pred_q = F.softmax(logits_q, dim=1).argmax(dim=1)
            # scalar
            correct = torch.eq(pred_q, y_qry).sum().item()
            corrects[0] = corrects[0] + correct

        # this is the loss and accuracy after the first update
        with torch.no_grad():
            # [setsz, nway]
            logits_q = net(x_qry, fast_weights, bn_training=True)
            # [setsz]
            pred_q = F.softmax(logits_q, dim=1).argmax(dim=1)
            # scalar
            correct = torch.eq(pred_q, y_qry).sum().item()
            corrects[1] = corrects[1] + correct

        for k in range(1, self.update_step_test):
            # 1. run the i-th task and compute loss for k=1~K-1
            logits = net(x_spt, fast_weights, bn_training=True)
            loss = F.cross_entropy(logits, y_spt)
            # 2. compute grad on theta_pi
            grad = torch.autograd.grad(loss, fast_weights)
            # 3. theta_pi = theta_pi - train_lr * grad
            fast_weights = list(map(lambda p: p[1] - self.update_lr * p[0], zip(grad, fast_weights)))

            logits_q = net(x_qry, fast_weights, bn_training=True)
            # loss_q will be overwritten and just keep the loss_q on last update step.
            loss_q = F.cross_entropy(logits_q, y_qry)

            with torch.no_grad():
                pred_q = F.softmax(logits_q, dim=1).argmax(dim=1)
                correct = torch.eq(pred_q, y_qry).sum().item()  # convert to numpy
                corrects[k + 1] = corrects[k + 1] + correct


        del net

        accs = np.array(corrects) / querysz

        return accs
"""

# omniglot_train.py's main, smaller (8 channels, a few steps), on synthetic tasks
TRAIN_SOURCE = """
def main(args):

    torch.manual_seed(222)
    np.random.seed(222)

    print(args)

    config = [
        ('conv2d', [8, 1, 3, 3, 2, 0]),
        ('relu', [True]),
        ('bn', [8]),
        ('conv2d', [8, 8, 3, 3, 2, 0]),
        ('relu', [True]),
        ('bn', [8]),
        ('conv2d', [8, 8, 3, 3, 2, 0]),
        ('relu', [True]),
        ('bn', [8]),
        ('conv2d', [8, 8, 2, 2, 1, 0]),
        ('relu', [True]),
        ('bn', [8]),
        ('flatten', []),
        ('linear', [args.n_way, 8])
    ]

    device = torch.device('cpu')
    maml = Meta(args, config).to(device)
    initialize(maml.net)

    tmp = filter(lambda x: x.requires_grad, maml.parameters())
    num = sum(map(lambda x: np.prod(x.shape), tmp))
    print('Total trainable tensors:', num)

    db_train = SyntheticNShot(batchsz=args.task_num, n_way=args.n_way, k_shot=args.k_spt, k_query=args.k_qry, imgsz=args.imgsz)

    for step in range(3):

        x_spt, y_spt, x_qry, y_qry = db_train.next()
        x_spt, y_spt, x_qry, y_qry = torch.from_numpy(x_spt).to(device), torch.from_numpy(y_spt).to(device), \\
                                     torch.from_numpy(x_qry).to(device), torch.from_numpy(y_qry).to(device)

        # set traning=True to update running_mean, running_variance, bn_weights, bn_bias
        accs = maml(x_spt, y_spt, x_qry, y_qry)
        record(accs)
        record(state_of(maml.net))

        if step % 30 == 0:
            print('step:', step, '\\ttraining acc:', accs)

        if step % 2 == 0:
            accs = []
            for _ in range(2//args.task_num):
                # test
                x_spt, y_spt, x_qry, y_qry = db_train.next('test')
                x_spt, y_spt, x_qry, y_qry = torch.from_numpy(x_spt).to(device), torch.from_numpy(y_spt).to(device), \\
                                             torch.from_numpy(x_qry).to(device), torch.from_numpy(y_qry).to(device)

                # split to single task each time
                for x_spt_one, y_spt_one, x_qry_one, y_qry_one in zip(x_spt, y_spt, x_qry, y_qry):
                    test_acc = maml.finetunning(x_spt_one, y_spt_one, x_qry_one, y_qry_one)
                    accs.append( test_acc )

            # [b, update_step+1]
            accs = np.array(accs).mean(axis=0).astype(np.float16)
            print('Test acc:', accs)
            record(accs)
            record(state_of(maml.net))

main(args)
"""

STEPS = [
    ("import  torch\n", "import  retrograd as torch\n"),
    ("from    torch", "from    retrograd"),
    ("        self.meta_optim.zero_grad()\n", ""),
    ("        loss_q.backward()", "        grads = loss_q.backward()"),
    ("        self.meta_optim.step()", "        self.meta_optim.step(grads)"),
]


class SyntheticNShot:
    """OmniglotNShot's ``next(mode)`` on synthetic classes: each class a fixed 28x28
    template, each image the template plus noise, labels ``0..n_way-1`` shuffled within a
    set (float32 images ``[b, setsz, 1, 28, 28]``, int64 labels ``[b, setsz]``)."""

    def __init__(self, batchsz, n_way, k_shot, k_query, imgsz):
        self.rng = np.random.default_rng(460)
        self.templates = self.rng.normal(size=(12, 1, imgsz, imgsz))
        self.batchsz, self.n_way, self.k_shot, self.k_query = batchsz, n_way, k_shot, k_query

    def _set(self, classes, shots):
        labels = np.repeat(np.arange(self.n_way), shots)
        self.rng.shuffle(labels)
        noise = self.rng.normal(scale=0.5, size=(len(labels), *self.templates.shape[1:]))
        return (self.templates[classes[labels]] + noise), labels

    def next(self, mode="train"):
        pool = np.arange(0, 8) if mode == "train" else np.arange(8, 12)
        batch = [[], [], [], []]
        for _ in range(self.batchsz):
            classes = self.rng.choice(pool, self.n_way, replace=False)
            x_spt, y_spt = self._set(classes, self.k_shot)
            x_qry, y_qry = self._set(classes, self.k_query)
            for part, value in zip(batch, (x_spt, y_spt, x_qry, y_qry)):
                part.append(value)
        return tuple(np.stack(part) for part in batch)


@pytest.mark.usefixtures("global_streams_restored")
def test_dragen1860_maml_meta_trains_and_finetunes_as_torch(capsys):
    torch.manual_seed(0)
    initialize = initializer()
    args = SimpleNamespace(
        n_way=4,
        k_spt=1,
        k_qry=3,
        imgsz=28,
        imgc=1,
        task_num=2,
        meta_lr=1e-3,
        update_lr=0.4,
        update_step=2,
        update_step_test=3,
    )
    records, logs = [], []
    # in float64: an element of a conv weight has a meta-gradient near 1e-7, whose sign under
    # float32 rounding (and so Adam's first step) is noise, and the batch-norm statistics of
    # four samples make the training chaotic enough to spread it
    torch.set_default_dtype(torch.float64)
    rg.set_default_dtype(rg.float64)
    try:
        run_both(args, initialize, records, logs, capsys)
    finally:
        torch.set_default_dtype(torch.float32)
        rg.set_default_dtype(rg.float32)
    theirs, ours = records
    assert logs[0].splitlines()[1:] == logs[1].splitlines()[1:]
    assert_records_agree(ours, theirs, rtol=1e-7, atol=1e-9)


def run_both(args, initialize, records, logs, capsys):
    for lib in (torch, rg):
        record = []
        source = LEARNER_SOURCE + META_SOURCE + TRAIN_SOURCE
        if lib is rg:
            source = ported_imports(port(source, STEPS))
        run_source(
            source,
            lib,
            record=record.append,
            initialize=initialize,
            state_of=state_of,
            SyntheticNShot=SyntheticNShot,
            args=args,
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
