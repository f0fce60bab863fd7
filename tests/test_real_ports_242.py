"""Real ports, continued (the harness: ``tests/real_ports.py``): LoRA and DoRA adapters written
here in the style of huggingface/peft (an adapter mixin, a low-rank ``Linear`` wrapper and a
model that injects it by module replacement), injected into a small transformer, fine-tuned a
few steps, merged, unmerged and finally unloaded, against torch's run of the same code from
the same weights.

What it exercises: the injection's walk over ``[key for key, _ in model.named_modules()]``
with ``model.get_submodule(".".join(key.split(".")[:-1]))`` for the parent, the
multiply-inherited ``class Linear(nn.Module, LowRankMixin)`` whose mixin ``__init__`` fills
``nn.ModuleDict({})``/``nn.ParameterDict()`` attributes, ``self.lora_drop.update(
nn.ModuleDict({...}))``, ``setattr(parent, attr, new)`` to swap a layer in, freezing by
name with ``p.requires_grad = False`` (with ``bias="all"`` and ``bias="lora_only"`` turning
biases back on), ``requires_grad_`` of the adapter dicts, ``nn.init.kaiming_uniform_(...,
a=math.sqrt(5))``/``nn.init.zeros_``, ``self.to(device, dtype=...)``, DoRA's magnitude from
``torch.linalg.norm(w, dim=1)``, its forward with the detached row norms, ``merge``/``unmerge``
through ``base_layer.weight.data = ...`` and ``w.data -= delta`` (DoRA's through the cached
norms), the safe merge's ``torch.isfinite(merged).all()``, disabling the adapters (which
unmerges) and ``merge_and_unload``; the base model's ``F.scaled_dot_product_attention(...,
is_causal=True)``.

The lines changed: the gradient lines (``grads = loss.backward()`` given to
``optimizer.step``); the program imports nothing of torch's, using the harness's names.
"""

from __future__ import annotations

import numpy as np
import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

PEFT_LORA_SOURCE = """
import math
import re
import warnings
from typing import Any

# (torch, nn and F are the harness's: torch's modules, or retrograd's in the port)


def parent_and_child(model, key):
    "The module holding model.<key>, the module itself and its attribute name."
    parent = model.get_submodule(".".join(key.split(".")[:-1]))  # "" is the model
    return parent, model.get_submodule(key), key.split(".")[-1]


def maybe_transposed(w, fan_in_fan_out):
    if not fan_in_fan_out:
        return w
    return torch.nn.Parameter(w.T) if isinstance(w, torch.nn.Parameter) else w.T


class AdapterMixin:
    "What every adapted layer shares: its wrapped base layer, the active and merged adapters."

    trainable_attrs = ()  # names of the attributes that hold adapter weights
    _active = "default"
    _disabled = False
    merged_names = []

    def base(self):
        layer = self
        while hasattr(layer, "base_layer"):
            layer = layer.base_layer
        return layer

    @property
    def weight(self):
        return self.base().weight

    @property
    def bias(self):
        return self.base().bias

    @property
    def merged(self):
        return len(self.merged_names) > 0

    @property
    def disabled(self):
        return self._disabled

    @property
    def active_names(self):
        return [self._active] if isinstance(self._active, str) else self._active

    def activate(self, names):
        names = [names] if isinstance(names, str) else names
        for attr in self.trainable_attrs:
            for name, part in getattr(self, attr).items():
                part.requires_grad_(name in names)
        self._active = names

    def set_enabled(self, enabled):
        if enabled:
            self.activate(self.active_names)
        else:
            for attr in self.trainable_attrs:
                getattr(self, attr).requires_grad_(False)
        self._disabled = not enabled

    def to_merge(self, names=None):
        names = self.active_names if names is None else names
        if self.merged:
            names = [n for n in names if n not in set(self.merged_names)]
            warnings.warn(f"adapters {self.merged_names} are merged already; now merging {names}")
        return names


class LowRankMixin(AdapterMixin):
    trainable_attrs = ("lora_down", "lora_up", "lora_emb_down", "lora_emb_up")

    def __init__(self, base_layer, **extra):
        self.base_layer = base_layer
        self.rank, self.alpha, self.scale, self.dora = {}, {}, {}, {}
        self.lora_drop = nn.ModuleDict({})
        self.lora_down = nn.ModuleDict({})
        self.lora_up = nn.ModuleDict({})
        self.lora_emb_down = nn.ParameterDict({})  # (for embeddings: unused by Linear)
        self.lora_emb_up = nn.ParameterDict({})
        self.lora_magnitude = None
        self._disabled, self.merged_names, self._cache, self.extra = False, [], {}, extra
        inner = self.base()
        if not isinstance(inner, nn.Linear):
            raise ValueError(f"cannot adapt a {type(inner).__name__}")
        self.in_features, self.out_features = inner.in_features, inner.out_features

    def add_adapter(self, name, rank, alpha, dropout, init, rslora, use_dora=False):
        if rank <= 0:
            raise ValueError(f"the rank must be positive, not {rank}")
        self.rank[name], self.alpha[name] = rank, alpha
        drop = nn.Dropout(p=dropout) if dropout > 0.0 else nn.Identity()
        self.lora_drop.update(nn.ModuleDict({name: drop}))
        self.lora_down[name] = nn.Linear(self.in_features, rank, bias=False)
        self.lora_up[name] = nn.Linear(rank, self.out_features, bias=False)
        self.scale[name] = alpha / math.sqrt(rank) if rslora else alpha / rank
        if init:
            self.init_adapter(name, init)
        w = self.base().weight
        if w.dtype.is_floating_point or w.dtype.is_complex:
            self.to(w.device, dtype=w.dtype)  # the adapter follows the base layer's dtype
        self.dora[name] = use_dora
        if use_dora:
            self.init_magnitude(name)
        self.activate(self.active_names)

    def init_adapter(self, name, init):
        if init is True:  # down as nn.Linear's default, up at zero: no change at first
            nn.init.kaiming_uniform_(self.lora_down[name].weight, a=math.sqrt(5))
        elif init == "gaussian":
            nn.init.normal_(self.lora_down[name].weight, std=1 / self.rank[name])
        else:
            raise ValueError(f"unknown initialisation {init!r}")
        nn.init.zeros_(self.lora_up[name].weight)

    def row_norms(self, w, delta, scale):
        "The L2 norm of each output row of w + scale * delta."
        combined = w + scale * delta
        return torch.linalg.norm(combined, dim=1).to(combined.dtype)

    def init_magnitude(self, name):
        delta = self.lora_up[name].weight @ self.lora_down[name].weight
        norms = self.row_norms(self.base().weight, delta, self.scale[name])
        self.lora_magnitude = nn.ParameterDict()
        self.lora_magnitude[name] = nn.Parameter(norms, requires_grad=True)
        self.trainable_attrs = self.trainable_attrs + ("lora_magnitude",)

    def dora_extra(self, x, down, up, scale, name):
        "What DoRA adds to the base output: the rescaled base output and the low-rank path."
        w = self.base().weight
        # the norm is treated as a constant: no gradient flows through it (DoRA, section 4.3)
        norms = self.row_norms(w, up.weight @ down.weight, scale).detach()
        ratio = (self.lora_magnitude[name] / norms).view(1, -1)
        base_out = F.linear(x, maybe_transposed(w, self.fan_in_fan_out))
        return (ratio - 1) * base_out + ratio * up(down(x)) * scale


class Linear(nn.Module, LowRankMixin):
    "An nn.Linear with low-rank adapters beside it."

    def __init__(self, base_layer, name, rank=0, alpha=1, dropout=0.0, fan_in_fan_out=False,
                 init=True, rslora=False, use_dora=False, **extra):
        super().__init__()
        LowRankMixin.__init__(self, base_layer, **extra)
        self.fan_in_fan_out = fan_in_fan_out  # weights stored (in, out) when True
        self._active = name
        self.add_adapter(name, rank, alpha, dropout, init, rslora, use_dora=use_dora)

    def delta(self, name):
        w = self.lora_up[name].weight @ self.lora_down[name].weight
        return maybe_transposed(w, self.fan_in_fan_out) * self.scale[name]

    def merge(self, safe_merge=False, names=None):
        for name in self.to_merge(names):
            if name not in self.lora_down.keys():
                continue
            inner, delta = self.base(), self.delta(name)
            w = inner.weight.data.clone() if safe_merge else inner.weight.data
            if self.dora[name]:
                # remember the norm of the unmerged weight: unmerging needs it
                norms = self.row_norms(w, delta, scale=1).detach()
                self._cache[f"{name}-norms"] = norms
                merged = (self.lora_magnitude[name] / norms).view(-1, 1) * (w + delta)
            else:
                merged = w + delta
            if safe_merge and not torch.isfinite(merged).all():
                raise ValueError(f"merging adapter {name} would give non-finite weights")
            inner.weight.data = merged
            self.merged_names.append(name)

    def unmerge(self):
        if not self.merged:
            warnings.warn("nothing is merged")
            return
        while self.merged_names:
            name = self.merged_names.pop()
            if name not in self.lora_down.keys():
                continue
            w = self.base().weight
            if self.dora[name]:
                ratio = self.lora_magnitude[name] / self._cache.pop(f"{name}-norms")
                w.data = w.data / ratio.view(-1, 1) - self.delta(name)
            else:
                w.data -= self.delta(name)

    def forward(self, x, *args, **kwargs):
        if self.disabled:
            if self.merged:
                self.unmerge()
            return self.base_layer(x, *args, **kwargs)
        out = self.base_layer(x, *args, **kwargs)
        if self.merged:
            return out
        dtype = out.dtype
        for name in self.active_names:
            if name not in self.lora_down.keys():
                continue
            down, up, scale = self.lora_down[name], self.lora_up[name], self.scale[name]
            x = self.lora_drop[name](x.to(down.weight.dtype))
            if self.dora[name]:
                out = out + self.dora_extra(x, down, up, scale, name)
            else:
                out = out + up(down(x)) * scale
        return out.to(dtype)

    def __repr__(self):
        return "lora." + super().__repr__()


class LowRankModel(nn.Module):
    prefix = "lora_"

    def __init__(self, model, config, name):
        super().__init__()
        self.model, self.configs, self.active = model, {name: config}, name
        self.inject(name)

    @property
    def active_names(self):
        return [self.active] if isinstance(self.active, str) else self.active

    @staticmethod
    def targeted(config, key):
        if isinstance(config.target_modules, str):  # a regular expression over the whole key
            return re.fullmatch(config.target_modules, key)
        return any(key == t or key.endswith(f".{t}") for t in config.target_modules)

    def inject(self, name):
        config = self.configs[name]
        for key in [key for key, _ in self.model.named_modules()]:
            if not self.targeted(config, key):
                continue
            parent, child, attr = parent_and_child(self.model, key)
            if isinstance(child, LowRankMixin):
                child.add_adapter(name, config.r, config.lora_alpha, config.lora_dropout,
                                  config.init_lora_weights, config.use_rslora, config.use_dora)
            else:
                wrapped = Linear(child, name, rank=config.r, alpha=config.lora_alpha,
                                 dropout=config.lora_dropout, fan_in_fan_out=config.fan_in_fan_out,
                                 init=config.init_lora_weights, rslora=config.use_rslora,
                                 use_dora=config.use_dora)
                self.swap(parent, attr, wrapped, child)
        self.freeze_all_but_adapters()

    def swap(self, parent, attr, new, old):
        setattr(parent, attr, new)
        old = getattr(old, "base_layer", old)
        for sub_name, sub in new.named_modules():
            if self.prefix in sub_name:
                sub.to(old.weight.device)

    def freeze_all_but_adapters(self):
        for n, p in self.model.named_parameters():
            if self.prefix not in n:
                p.requires_grad = False
        for name in self.active_names:
            bias = self.configs[name].bias
            if bias == "all":
                for n, p in self.model.named_parameters():
                    if "bias" in n:
                        p.requires_grad = True
            elif bias == "lora_only":
                for m in self.model.modules():
                    if isinstance(m, LowRankMixin) and m.bias is not None:
                        m.bias.requires_grad = True
            elif bias != "none":
                raise NotImplementedError(bias)

    def adapted_layers(self):
        return [m for m in self.model.modules() if isinstance(m, LowRankMixin)]

    def enable_adapter_layers(self):
        for m in self.adapted_layers():
            m.set_enabled(True)

    def disable_adapter_layers(self):
        for m in self.adapted_layers():
            m.set_enabled(False)

    def merge_adapter(self):
        for m in self.adapted_layers():
            m.merge()

    def unmerge_adapter(self):
        for m in self.adapted_layers():
            m.unmerge()

    def merge_and_unload(self, safe_merge=False, names=None):
        for key in [k for k, _ in self.model.named_modules() if self.prefix not in k]:
            try:
                parent, child, attr = parent_and_child(self.model, key)
            except AttributeError:  # inside a layer already swapped back
                continue
            if hasattr(child, "base_layer"):  # an adapted layer
                child.merge(safe_merge=safe_merge, names=names)
                self.swap(parent, attr, child.base(), child)
        return self.model

    def forward(self, *args: Any, **kwargs: Any):  # the wrapped model's
        return self.model(*args, **kwargs)
"""

BASE_MODEL_SOURCE = """
class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.query, self.key = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.value, self.out = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        split = lambda y: y.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        mixed = F.scaled_dot_product_attention(
            split(self.query(x)), split(self.key(x)), split(self.value(x)), is_causal=True
        )
        return self.out(mixed.transpose(1, 2).reshape(b, t, c))


class Layer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm_1, self.norm_2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm_1(x))
        return x + self.ff(self.norm_2(x))


class SmallLM(nn.Module):
    def __init__(self, vocab, dim, heads, depth):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([Layer(dim, heads) for _ in range(depth)])
        self.unembed = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        h = self.embed(ids)
        for layer in self.layers:
            h = layer(h)
        return self.unembed(h)
"""

TRAIN_SOURCE = """
import types

base = SmallLM(11, 8, 2, 2)
initialize(base)
config = types.SimpleNamespace(
    r=4,
    lora_alpha=8,
    lora_dropout=0.0,
    fan_in_fan_out=False,
    init_lora_weights=True,
    use_rslora=use_rslora,
    use_dora=use_dora,
    bias=bias,
    target_modules=target_modules,
)
tuned = LowRankModel(base, config, "default")
initialize(tuned)  # the adapters' own kaiming draws
record.append([n for n, p in tuned.named_parameters() if p.requires_grad])
record.append([n for n, _ in tuned.named_modules()])
record.append(repr(tuned.model.layers[0].attn.query).replace(torch.__name__ + ".", "torch."))
n_train = sum(p.numel() for p in tuned.parameters() if p.requires_grad)
n_all = sum(p.numel() for p in tuned.parameters())
print(f"{n_train:,d} of {n_all:,d} parameters train ({100 * n_train / n_all:.4f}%)")

optimizer = torch.optim.AdamW([p for p in tuned.parameters() if p.requires_grad], lr=5e-2)
tokens = torch.tensor(batches)
for ids in tokens:
    logits = tuned(ids[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append({n: p.detach().numpy().copy() for n, p in tuned.named_parameters()})

tuned.eval()
probe = tokens[0][:, :-1]
value = tuned.model.layers[1].attn.value
with torch.no_grad():
    record.append(tuned(probe).numpy())
    tuned.merge_adapter()
    record.append(tuned(probe).numpy())
    record.append(value.base_layer.weight.numpy().copy())
    tuned.unmerge_adapter()
    record.append(value.base_layer.weight.numpy().copy())
    tuned.disable_adapter_layers()
    record.append(tuned(probe).numpy())
    record.append([n for n, p in tuned.named_parameters() if p.requires_grad])
    tuned.enable_adapter_layers()
    plain = tuned.merge_and_unload(safe_merge=safe_merge)
    record.append(list(plain.state_dict()))
    record.append({k: v.numpy().copy() for k, v in plain.state_dict().items()})
    record.append(plain(probe).numpy())
"""

STEPS = [
    ("    loss.backward()\n    optimizer.step()\n",
     "    grads = loss.backward()\n    optimizer.step(grads)\n"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("use_dora", "use_rslora", "bias", "target_modules", "safe_merge"),
    [
        (False, False, "none", ["query", "value"], False),
        (True, False, "none", ["query", "value"], False),
        (True, True, "all", r".*\.(key|value|ff\.0)", True),
        (False, True, "lora_only", r".*\.(out|value|ff\.2)", True),
    ],
)
def test_peft_lora_and_dora_injected_trained_merged_and_unloaded_as_torch(
    capsys, use_dora, use_rslora, bias, target_modules, safe_merge
):
    rng = np.random.default_rng(24201)
    batches = rng.integers(0, 11, (3, 2, 7)).tolist()
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        PEFT_LORA_SOURCE + BASE_MODEL_SOURCE + TRAIN_SOURCE, STEPS, capsys, 24201,
        batches=batches, initialize=initializer(), use_dora=use_dora, use_rslora=use_rslora,
        bias=bias, target_modules=target_modules, safe_merge=safe_merge,
    )  # fmt: skip
    assert our_log == their_log
    # the keys' bias has no true gradient (it shifts a query's scores by one constant, which
    # the softmax ignores): trained (bias="all"), Adam follows the rounding noise
    no_true_gradient = [
        f"{prefix}layers.{i}.attn.key{part}.bias"
        for prefix in ("", "model.")
        for i in range(2)
        for part in ("", ".base_layer")
    ]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5, skip=no_true_gradient)
