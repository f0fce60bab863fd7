# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- RWKV-4 in RNN mode as BlinkDL writes it (github.com/BlinkDL/ChatRWKV
  ``RWKV_in_150_lines.py``), on a small random checkpoint (2 layers, 8 channels, a vocabulary
  of 31) and a character tokenizer for the 20B one: ``class RWKV_RNN(torch.jit.ScriptModule)``
  with ``@torch.jit.script_method`` methods (``i:int`` annotations), ``self.eval()`` in
  ``__init__``, ``torch.load(args.MODEL_NAME + '.pth', map_location='cpu')`` of a state dict
  rewritten in place (``w[k].squeeze()``, ``-torch.exp(w[k].float())``), the weights regrouped
  into ``types.SimpleNamespace`` trees (``setattr``/``getattr``, a dict of blocks keyed by
  ``int``), ``F.layer_norm(x, (n_embd,), weight=w.weight, bias=w.bias)``, the time mixing
  (``torch.maximum``, the ``exp``-shifted ``wkv`` recurrence) and channel mixing
  (``torch.square(torch.relu(kw @ xk))``) writing rows of the state in place
  (``state[5*i+1] = x``), ``state == None``, ``torch.zeros(n_layer * 5, n_embd)`` with
  ``state[5*i+4] = -1e30``, ``self.w.emb.weight[token]`` indexed by a NumPy integer,
  ``x.float()``, ``init_out.clone(), init_state.clone()``, and ``sample_logits`` in NumPy
  (``F.softmax(out, dim=-1).numpy()``, ``np.sort(probs)[::-1]``, ``np.random.choice``) over three
  trials of generation, printed as they go.

The checkpoint is written by each library's own ``save`` (retrograd's ``load`` reads its own
files; torch's pickles are refused by design, API.md). Nothing else changed: the program has no
gradient lines. The defect found: there was no ``torch.jit.ScriptModule`` nor
``torch.jit.script_method``; they are now an ``nn.Module`` and a decorator that returns the
method (the eager meaning ``rg.jit`` gives TorchScript's names).
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import retrograd as rg

RWKV_SOURCE = """
np.set_printoptions(precision=4, suppress=True, linewidth=200)

context = "\\nIn a shocking finding, scientist discovered a herd of dragons."
NUM_TRIALS = 3
LENGTH_PER_TRIAL = 12
TEMPERATURE = 1.0
TOP_P = 0.85

########################################################################################################

class RWKV_RNN(torch.jit.ScriptModule):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.eval() # set torch to inference mode

        w = torch.load(args.MODEL_NAME + '.pth', map_location='cpu')
        for k in w.keys():
            if      '.time_' in k: w[k] = w[k].squeeze()
            if '.time_decay' in k: w[k] = -torch.exp(w[k].float()) # the real time decay is like e^{-e^x}
            else: w[k] = w[k].float() # convert to f32 type

        self.w = types.SimpleNamespace() # set self.w from w
        self.w.blocks = {}
        for k in w.keys(): # example: "blocks.0.att.time_first" => self.w.blocks[0].att.time_first
            parts = k.split('.')
            last = parts.pop()
            here = self.w
            for p in parts:
                if p.isdigit():
                    p = int(p)
                    if p not in here: here[p] = types.SimpleNamespace()
                    here = here[p]
                else:
                    if not hasattr(here, p): setattr(here, p, types.SimpleNamespace())
                    here = getattr(here, p)
            setattr(here, last, w[k])

    def layer_norm(self, x, w):
        return F.layer_norm(x, (self.args.n_embd,), weight=w.weight, bias=w.bias)

    @torch.jit.script_method
    def channel_mixing(self, x, state, i:int, time_mix_k, time_mix_r, kw, vw, rw):
        xk = x * time_mix_k + state[5*i+0] * (1 - time_mix_k)
        xr = x * time_mix_r + state[5*i+0] * (1 - time_mix_r)
        state[5*i+0] = x
        r = torch.sigmoid(rw @ xr)
        k = torch.square(torch.relu(kw @ xk)) # square relu, primer paper
        return r * (vw @ k)

    @torch.jit.script_method
    def time_mixing(self, x, state, i:int, time_mix_k, time_mix_v, time_mix_r, time_first, time_decay, kw, vw, rw, ow):
        xk = x * time_mix_k + state[5*i+1] * (1 - time_mix_k)
        xv = x * time_mix_v + state[5*i+1] * (1 - time_mix_v)
        xr = x * time_mix_r + state[5*i+1] * (1 - time_mix_r)
        state[5*i+1] = x
        r = torch.sigmoid(rw @ xr)
        k = kw @ xk
        v = vw @ xv

        aa = state[5*i+2]
        bb = state[5*i+3]
        pp = state[5*i+4]
        ww = time_first + k
        qq = torch.maximum(pp, ww)
        e1 = torch.exp(pp - qq)
        e2 = torch.exp(ww - qq)
        a = e1 * aa + e2 * v
        b = e1 * bb + e2
        wkv = a / b
        ww = pp + time_decay
        qq = torch.maximum(ww, k)
        e1 = torch.exp(ww - qq)
        e2 = torch.exp(k - qq)
        state[5*i+2] = e1 * aa + e2 * v
        state[5*i+3] = e1 * bb + e2
        state[5*i+4] = qq
        return ow @ (r * wkv)

    def forward(self, token, state):
        with torch.no_grad():
            if state == None:
                state = torch.zeros(self.args.n_layer * 5, self.args.n_embd)
                for i in range(self.args.n_layer): state[5*i+4] = -1e30 # -infinity

            x = self.w.emb.weight[token]
            x = self.layer_norm(x, self.w.blocks[0].ln0)
            for i in range(self.args.n_layer):
                att = self.w.blocks[i].att
                x = x + self.time_mixing(self.layer_norm(x, self.w.blocks[i].ln1), state, i,
                    att.time_mix_k, att.time_mix_v, att.time_mix_r, att.time_first, att.time_decay,
                    att.key.weight, att.value.weight, att.receptance.weight, att.output.weight)
                ffn = self.w.blocks[i].ffn
                x = x + self.channel_mixing(self.layer_norm(x, self.w.blocks[i].ln2), state, i,
                    ffn.time_mix_k, ffn.time_mix_r,
                    ffn.key.weight, ffn.value.weight, ffn.receptance.weight)

            x = self.w.head.weight @ self.layer_norm(x, self.w.ln_out)
            return x.float(), state

##########################################################################################################

def sample_logits(out, temperature=1.0, top_p=0.8):
    probs = F.softmax(out, dim=-1).numpy()
    sorted_probs = np.sort(probs)[::-1]
    cumulative_probs = np.cumsum(sorted_probs)
    cutoff = float(sorted_probs[np.argmax(cumulative_probs > top_p)])
    probs[probs < cutoff] = 0
    if temperature != 1.0:
        probs = probs.pow(1.0 / temperature)
    probs = probs / np.sum(probs)
    out = np.random.choice(a=len(probs), p=probs)
    return out

########################################################################################################

print(f'\\nUsing CPU. Loading {args.MODEL_NAME} ...')
model = RWKV_RNN(args)

print(f'\\nPreprocessing context (slow version. see v2/rwkv/model.py for fast version)')
init_state = None
for token in tokenizer.encode(context).ids:
    init_out, init_state = model.forward(token, init_state)

for TRIAL in range(NUM_TRIALS):
    print(f'\\n\\n--[ Trial {TRIAL} ]-----------------', context, end="")
    all_tokens = []
    out_last = 0
    out, state = init_out.clone(), init_state.clone()
    for i in range(LENGTH_PER_TRIAL):
        token = sample_logits(out, TEMPERATURE, TOP_P)
        all_tokens += [token]
        tmp = tokenizer.decode(all_tokens[out_last:])
        if '\\ufffd' not in tmp: # only print when we have a valid utf-8 string
            print(tmp, end="", flush=True)
            out_last = i + 1
        out, state = model.forward(token, state)
print('\\n')
"""

ALPHABET = "\n .,Iabcdefghijklmnopqrstuvwxyz"


class CharTokenizer:
    """A stand-in for ``tokenizers.Tokenizer``: one id per character."""

    def encode(self, text):
        return types.SimpleNamespace(ids=[ALPHABET.index(c) for c in text])

    def decode(self, ids):
        return "".join(ALPHABET[int(i)] for i in ids)


def _checkpoint(n_layer, n_embd, vocab):
    """An RWKV-4 state dict of random values, in the shapes of the released checkpoints."""
    rng = np.random.default_rng(44)
    c = n_embd
    shapes = {"emb.weight": (vocab, c), "blocks.0.ln0.weight": (c,), "blocks.0.ln0.bias": (c,)}
    for i in range(n_layer):
        b = f"blocks.{i}."
        shapes.update(
            {
                b + "ln1.weight": (c,),
                b + "ln1.bias": (c,),
                b + "ln2.weight": (c,),
                b + "ln2.bias": (c,),
            }
        )
        shapes.update({b + f"att.{n}": (c,) for n in ("time_decay", "time_first")})
        shapes.update({b + f"att.time_mix_{n}": (1, 1, c) for n in "kvr"})
        shapes.update(
            {b + f"att.{n}.weight": (c, c) for n in ("key", "value", "receptance", "output")}
        )
        shapes.update({b + f"ffn.time_mix_{n}": (1, 1, c) for n in "kr"})
        shapes.update(
            {
                b + "ffn.key.weight": (4 * c, c),
                b + "ffn.receptance.weight": (c, c),
                b + "ffn.value.weight": (c, 4 * c),
            }
        )
    shapes.update({"ln_out.weight": (c,), "ln_out.bias": (c,), "head.weight": (vocab, c)})
    state = {}
    for name, shape in shapes.items():
        if "time_mix" in name:
            value = rng.uniform(0, 1, shape)
        elif (
            name.endswith("ln0.weight")
            or (".ln" in name and name.endswith("weight"))
            or name == "ln_out.weight"
        ):
            value = 1 + 0.1 * rng.standard_normal(shape)
        else:
            value = rng.standard_normal(shape) * (0.5 if "weight" in name else 1.0)
        state[name] = value.astype(np.float32)
    return state


def _run_from_file(path, lib, args):
    """The program run from a file (TorchScript compiles the ``script_method``s from their
    source, which it reads by file name)."""
    path.write_text(RWKV_SOURCE)
    names = {"torch": lib, "F": lib.nn.functional, "np": np, "types": types}
    names.update(args=args, tokenizer=CharTokenizer())
    exec(compile(RWKV_SOURCE, str(path), "exec"), names)
    return names


@pytest.mark.parametrize("seed", [0, 1])
def test_rwkv4_rnn_generation_matches_torch(tmp_path, capsys, seed):
    args = types.SimpleNamespace(n_layer=2, n_embd=8)
    checkpoint = _checkpoint(args.n_layer, args.n_embd, len(ALPHABET))
    runs = []
    for lib in (torch, rg):
        args.MODEL_NAME = str(tmp_path / f"rwkv-{lib.__name__}")
        lib.save({k: lib.tensor(v) for k, v in checkpoint.items()}, args.MODEL_NAME + ".pth")
        np.random.seed(seed)
        names = _run_from_file(tmp_path / f"rwkv_{lib.__name__}.py", lib, args)
        runs.append((names, capsys.readouterr().out))
    (theirs, their_text), (ours, our_text) = runs
    assert our_text.replace("rwkv-retrograd", "rwkv-torch") == their_text
    assert their_text.count("--[ Trial") == 3
    generated = [part.split("dragons.", 1)[1] for part in their_text.split("--[ Trial")[1:]]
    assert all(len(text.strip("\n")) >= 12 for text in generated), generated
    assert len(set(generated)) == 3  # three different samples
    for name in ("init_out", "init_state", "out", "state"):
        np.testing.assert_allclose(ours[name].numpy(), theirs[name].numpy(), rtol=1e-4, atol=1e-5)
    assert isinstance(ours["model"], rg.nn.Module)


def test_script_module_is_a_module_and_script_method_keeps_the_method():
    """``torch.jit.ScriptModule`` subclasses build, hold parameters and train as modules;
    ``@torch.jit.script_method`` returns the method."""

    class Net(rg.jit.ScriptModule):
        def __init__(self):
            super().__init__()
            self.linear = rg.nn.Linear(2, 1)

        @rg.jit.script_method
        def scaled(self, x, i: int):
            return self.linear(x) * i

        def forward(self, x):
            return self.scaled(x, 3)

    net = Net()
    assert isinstance(net, rg.nn.Module) and [n for n, _ in net.named_parameters()] == [
        "linear.weight",
        "linear.bias",
    ]
    x = rg.tensor([[1.0, 2.0]])
    grads = net(x).sum().backward()
    np.testing.assert_allclose(net.linear.weight.grad(grads).numpy(), [[3.0, 6.0]])
