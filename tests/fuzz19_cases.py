"""Round 19 of the differential fuzzer against PyTorch: module hooks, ``nn.utils``, mixed
precision and ``functional_call``. Each generator takes a ``numpy`` generator and returns a
:class:`fuzz12_cases.Trial` written once against a namespace ``lib`` (``torch`` or
``retrograd``); :func:`fuzz12_cases.check` runs it on both and raises
:class:`fuzz_cases.Mismatch` on the first difference in raising or not, dtype, shape, value,
or in the calls the hooks saw (their order and what they were given, as text).

- ``hooks``: forward pre-hooks and hooks, the module's and the global ones
  (``register_module_forward_pre_hook``/``register_module_forward_hook``) (``with_kwargs``,
  ``prepend``, ``always_call``,
  results that replace the arguments or the output, a forward or a hook that raises), full
  backward hooks and pre-hooks (replacing the gradients), removal by handle, on nested and
  shared modules; state-dict hooks (``register_state_dict_pre_hook``/``post_hook``,
  ``_register_state_dict_hook``), ``load_state_dict``'s missing and unexpected keys with a
  shared module, and load hooks (``register_load_state_dict_pre_hook``/
  ``post_hook``, changing the keys a strict load checks);
- ``clip``: ``clip_grad_norm_`` over every norm type (inf, 0, negative, fractional) with
  ``error_if_nonfinite``, ``foreach`` and non-finite gradients, ``clip_grad_value_``,
  ``get_total_norm``/``clip_grads_with_norm_``, ``parameters_to_vector`` and
  ``vector_to_parameters``;
- ``packed``: ``pad_sequence`` (``batch_first``, ``padding_value``, ``padding_side``),
  ``pack_padded_sequence``/``pack_sequence`` (``enforce_sorted``) and ``pad_packed_sequence``
  (``total_length``), ``unpad_sequence``/``unpack_sequence``, through ``LSTM``/``GRU``/
  ``RNN`` (layers, bidirectional, initial state): outputs, final states and float64
  gradients;
- ``reparam``: ``weight_norm`` and ``spectral_norm`` (the hook form and the parametrization
  form, with ``dim``), ``parametrize.register_parametrization`` (``right_inverse``,
  ``unsafe``, ``cached``, ``remove_parametrizations``), pruning (``l1_unstructured``,
  ``random_unstructured`` counts, ``ln_structured``, ``global_unstructured``,
  ``custom_from_mask``, ``remove``), and the conv/linear + batch-norm fusions;
- ``amp``: ``GradScaler`` trajectories (scale, ``unscale_``, steps skipped on inf/NaN,
  growth and backoff, ``update(new_scale)``, ``state_dict``, misuse torch refuses),
  ``autocast`` blocks over the ops torch's CPU autocast leaves in their inputs' dtype,
  ``func.functional_call`` with tied weights, buffer dicts, ``strict`` and ``tie_weights``,
  ``stack_module_state``.

Known differences are left out of the draws and named where they are.
"""

from __future__ import annotations

import math

import numpy as np

import retrograd as rg
from fuzz12_cases import Trial, _pick
from fuzz14_cases import check
from fuzz_cases import _torch

__all__ = ["GENERATORS", "check"]

#: Left out of the draws (deliberate differences, API.md and the modules' docstrings):
#: - full backward hooks on a module called with several tensors or returning several are
#:   refused with a named error; a backward hook may return a bare tensor (torch reads it as a
#:   sequence of its rows); a hook that is not callable is refused at registration (torch's
#:   fails at the call);
#: - ``clip_grad_norm_`` accumulates the norm in float64 (float32 gradients: compared at
#:   float32's tolerance) and returns a Python float (torch's: a 0-d tensor);
#: - ``vector_to_parameters`` writes into the parameters in their own dtype (torch's
#:   ``param.data =`` takes the vector's);
#: - ``autocast`` never lowers precision: the ops torch's CPU autocast runs in bfloat16
#:   (``matmul``, ``linear``, convolutions...) are not drawn inside an enabled block;
#: - ``functional_call`` of tensors of another float dtype than the module's promotes (torch
#:   refuses the mixed product); forward's keyword names are retrograd's (``x``, not ``input``).
#: Torch bugs kept out: a global ``always_call`` forward hook registered ``with_kwargs`` is
#: called without the kwargs when the forward raises; ``unpad_sequence`` without
#: ``batch_first`` transposes its input in place (refused on a leaf that requires grad).

GENERATORS: dict = {}


def gen(name):
    def register(fn):
        GENERATORS[name] = fn
        return fn

    return register


def _arr(t):
    torch = _torch()
    if isinstance(t, torch.Tensor):
        return t.detach().numpy()
    return t.numpy()


def _shape(t) -> str:
    return "None" if t is None else str(tuple(int(n) for n in t.shape))


def _grad(lib, loss, leaves):
    """Gradients of ``loss`` w.r.t. ``leaves`` (zeros where unused), float64."""
    got = lib.autograd.grad(loss, leaves, allow_unused=True)
    return [lib.zeros_like(x) if g is None else g for g, x in zip(got, leaves)]


def _linear(lib, i, o, seed, bias=True):
    r = np.random.default_rng(seed)
    m = lib.nn.Linear(i, o, bias=bias).double()
    state = {"weight": lib.tensor(r.standard_normal((o, i)))}
    if bias:
        state["bias"] = lib.tensor(r.standard_normal(o))
    m.load_state_dict(state)
    return m


# ---- module hooks --------------------------------------------------------------------------


class _Scaled:
    """A module whose forward takes a keyword ``scale`` (made per library)."""

    @staticmethod
    def make(lib, fail):
        class Scaled(lib.nn.Module):
            def forward(self, x, scale=1.0):
                if fail:
                    raise ValueError("forward fails")
                return x * scale

        return Scaled()


def _hook_program(rng):
    """A list of hook registrations, drawn once and replayed on both libraries."""
    program = []
    for _ in range(int(rng.integers(1, 7))):
        where = str(_pick(rng, "inner", "inner", "outer", "act", "scaled", "global"))
        kind = str(_pick(rng, "pre", "post", "post", "backward", "backward_pre"))
        if where == "global":  # (torch's global forward hooks: nn.modules.module's)
            kind = str(_pick(rng, "pre", "post"))
        entry = {
            "where": where,
            "kind": kind,
            "prepend": bool(rng.random() < 0.3) and where != "global",
            "kwargs": bool(rng.random() < 0.3)
            and (kind == "post" or where != "global")
            and kind in ("pre", "post"),
            # (torch calls a global always_call hook registered with_kwargs without the
            # kwargs when the forward raises: a torch bug, kept out)
            "always": bool(rng.random() < 0.3) and kind == "post",
            "replace": bool(rng.random() < 0.4),
            "raises": bool(rng.random() < 0.06) and kind in ("pre", "post"),
            "remove": bool(rng.random() < 0.2),
            "factor": float(_pick(rng, 0.5, 2.0, -1.0, 3.0)),
        }
        if where == "global" and entry["kwargs"]:
            entry["always"] = False
        program.append(entry)
    return program


def _make_hook(e, k, log):
    """The hook of program entry ``e`` (number ``k``): it notes what it saw in ``log`` and may
    replace what it was given."""
    f = e["factor"]
    tag = f"{k}:{e['where']}.{e['kind']}"

    def shapes(ts):
        return [_shape(t) for t in ts]

    if e["kind"] == "pre":
        if e["kwargs"]:

            def hook(m, args, kwargs):
                log.append(f"{tag} args={shapes(args)} kwargs={sorted(kwargs)}")
                if e["raises"]:
                    raise ValueError("hook fails")
                if e["replace"]:
                    return tuple(a * f for a in args), dict(kwargs)
                return None

        else:

            def hook(m, args):
                log.append(f"{tag} args={shapes(args)}")
                if e["raises"]:
                    raise ValueError("hook fails")
                if e["replace"]:
                    return args[0] * f if len(args) == 1 else tuple(a * f for a in args)
                return None

    elif e["kind"] == "post":

        def hook(m, args, *rest):
            out = rest[-1]
            kw = f" kwargs={sorted(rest[0])}" if e["kwargs"] else ""
            log.append(f"{tag} args={shapes(args)}{kw} out={_shape(out)}")
            if e["raises"]:
                raise ValueError("hook fails")
            if e["replace"] and out is not None:
                return out * f + 0.25
            return None

    elif e["kind"] == "backward":

        def hook(m, grad_input, grad_output):
            log.append(f"{tag} gin={shapes(grad_input)} gout={shapes(grad_output)}")
            if e["replace"] and grad_input[0] is not None:
                return (grad_input[0] * f,)
            return None

    else:

        def hook(m, grad_output):
            log.append(f"{tag} gout={shapes(grad_output)}")
            if e["replace"]:
                return (grad_output[0] * f,)
            return None

    return hook


def _register(lib, module, e, hook):
    if module is None:  # global
        registry = lib.nn.modules.module
        if e["kind"] == "pre":
            return registry.register_module_forward_pre_hook(hook)
        return registry.register_module_forward_hook(
            hook, with_kwargs=e["kwargs"], always_call=e["always"]
        )
    if e["kind"] == "pre":
        return module.register_forward_pre_hook(hook, prepend=e["prepend"], with_kwargs=e["kwargs"])
    if e["kind"] == "post":
        return module.register_forward_hook(
            hook, prepend=e["prepend"], with_kwargs=e["kwargs"], always_call=e["always"]
        )
    if e["kind"] == "backward":
        return module.register_full_backward_hook(hook, prepend=e["prepend"])
    return module.register_full_backward_pre_hook(hook, prepend=e["prepend"])


def _forward_hooks(rng):
    program = _hook_program(rng)
    shared = bool(rng.random() < 0.5)  # the inner layer twice in the model
    fail = bool(rng.random() < 0.08)
    input_grad = bool(rng.random() < 0.8)
    scale = float(_pick(rng, 1.0, 2.0, -0.5))
    calls = int(_pick(rng, 1, 1, 2))
    xa = rng.standard_normal((2, 3))
    wa = rng.standard_normal((2, 3))
    backward_on = {e["where"] for e in program if e["kind"].startswith("backward")}

    def fn(lib):
        log: list = []
        inner = _linear(lib, 3, 3, 1)
        act = lib.nn.Tanh()
        scaled = _Scaled.make(lib, fail)
        layers = [inner, act, inner] if shared else [inner, act, _linear(lib, 3, 3, 2)]
        outer = lib.nn.Sequential(*layers)
        modules = {"inner": inner, "outer": outer, "act": act, "scaled": scaled, "global": None}
        handles = []
        try:
            for k, e in enumerate(program):
                module = modules[e["where"]]
                handles.append((e, _register(lib, module, e, _make_hook(e, k, log))))
            for e, h in handles:
                if e["remove"]:
                    h.remove()
            return _run_hooked(lib, outer, scaled, inner, log)
        finally:  # (the global hooks would run in every later test)
            for _, h in handles:
                h.remove()

    def _run_hooked(lib, outer, scaled, inner, log):
        x = lib.tensor(xa, requires_grad=input_grad)
        results = []
        for _ in range(calls):
            try:
                y = outer(x)
                # (backward hooks are for a module called with one tensor: no keyword then)
                y = scaled(y) if "scaled" in backward_on else scaled(y, scale=scale)
            except ValueError as error:
                log.append(f"raised {error}")
                return [str(log)]
            results.append(y)
        forward_log = list(log)
        loss = sum((y * lib.tensor(wa)).sum() for y in results)
        leaves = [inner.weight, inner.bias] + ([x] if input_grad else [])
        grads = _grad(lib, loss, leaves)
        backward_log = log[len(forward_log) :]
        if calls > 1:
            # (the two calls' graphs are independent branches of the loss: which one the
            # backward walks first is each engine's scheduling, not compared)
            backward_log = sorted(backward_log)
        return [*results, *grads, str(forward_log), str(backward_log)]

    return Trial(f"hooks {program} shared={shared} fail={fail} calls={calls}", fn)


def _state_hooks(rng):
    post_kind = str(_pick(rng, "public", "private", "none"))
    returns = bool(rng.random() < 0.3)
    pre = bool(rng.random() < 0.5)
    load_pre = str(_pick(rng, "none", "rename", "drop"))
    load_post = str(_pick(rng, "none", "log", "clear", "clear_missing", "returns"))
    strict = bool(rng.random() < 0.7)
    drop = str(_pick(rng, "none", "0.bias", "1.weight"))
    extra = bool(rng.random() < 0.4)
    on_child = bool(rng.random() < 0.5)

    def fn(lib):
        log: list = []
        model = lib.nn.Sequential(_linear(lib, 3, 2, 3), _linear(lib, 2, 2, 4))
        target = model[0] if on_child else model

        def post(module, state, prefix, meta):
            log.append(f"post prefix={prefix!r} keys={sorted(state)}")
            state[prefix + "extra"] = lib.tensor([1.0])
            if returns:
                return {k: v for k, v in state.items() if not k.endswith("bias")}
            return None

        if post_kind == "public":
            target.register_state_dict_post_hook(post)
        elif post_kind == "private":
            target._register_state_dict_hook(post)
        if pre:
            target.register_state_dict_pre_hook(
                lambda m, prefix, keep: log.append(f"pre prefix={prefix!r} keep={keep}")
            )
        saved = model.state_dict()
        out = [str(sorted(saved)), str(log)]
        # load: a fresh model, hooks changing the state or the keys
        other = lib.nn.Sequential(_linear(lib, 3, 2, 5), _linear(lib, 2, 2, 6))
        fresh = {k: lib.tensor(_arr(lib.tensor(np.asarray(v)))) for k, v in saved.items()}
        fresh.pop(drop, None)
        if extra:
            fresh["1.unused"] = lib.tensor([0.0])

        def load_pre_hook(module, state, prefix, *rest):
            log.append(f"load_pre prefix={prefix!r}")
            if load_pre == "rename" and prefix + "extra" in state:
                state.pop(prefix + "extra")
            if load_pre == "drop":
                state.pop(prefix + "weight", None)

        def load_post_hook(module, keys):
            missing, unexpected = list(keys.missing_keys), list(keys.unexpected_keys)
            log.append(f"load_post missing={missing} unexpected={unexpected}")
            if load_post == "clear":
                keys.missing_keys.clear()
                keys.unexpected_keys.clear()
            if load_post == "clear_missing":
                keys.missing_keys.clear()
            if load_post == "returns":
                return keys
            return None

        other_target = other[0] if on_child else other
        if load_pre != "none":
            other_target.register_load_state_dict_pre_hook(load_pre_hook)
        if load_post != "none":
            other_target.register_load_state_dict_post_hook(load_post_hook)
        try:
            result = other.load_state_dict(fresh, strict=strict)
            out.append(str((sorted(result.missing_keys), sorted(result.unexpected_keys))))
        except Exception as error:  # (either library's: the kind compared, as text)
            # (torch writes the values before it raises, retrograd without a post-hook
            # writes none: the values are not compared then)
            mismatch = type(error).__name__ in ("RuntimeError", "KeyMismatchError")
            return [*out, f"raised (keys mismatch: {mismatch})", str(log)]
        return [*out, str(log), other[0].weight, other[1].bias]

    name = (
        f"state hooks post={post_kind} returns={returns} pre={pre} load_pre={load_pre} "
        f"load_post={load_post} strict={strict} drop={drop} extra={extra} child={on_child}"
    )
    return Trial(name, fn)


def _load_keys(rng):
    """``load_state_dict`` of a model holding one module under two names, the state missing
    keys, holding keys no module has (dotted under a parameter, a bare child's name), in
    drawn order: the missing and unexpected keys, in torch's order, and the values loaded."""
    drop_p = float(_pick(rng, 0.0, 0.1, 0.3))
    extras = ["zz", "0.zz", "1.a.zz", "1.b.0.q.r", "0.0.weight.x", "1", "1.c.d", "0.1.bias.z"]
    chosen = [e for e in extras if rng.random() < 0.25]
    strict = bool(rng.random() < 0.4)
    seed = int(rng.integers(1 << 30))

    def fn(lib):
        def build():
            inner = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.BatchNorm1d(2))
            heads = lib.nn.ModuleDict({"a": lib.nn.Linear(2, 1), "b": inner})
            return lib.nn.Sequential(inner, heads, lib.nn.ReLU()).double()

        model = build()
        r = np.random.default_rng(seed)
        shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        # (first every entry, so that those the drawn state leaves are the same in both)
        model.load_state_dict({k: lib.tensor(np.full(shape, 0.5)) for k, shape in shapes.items()})
        state = {k: r.standard_normal(shape) for k, shape in shapes.items()}
        # (a shared norm's num_batches_tracked missing under one name only: torch completes it
        # with the count the other name has just loaded, retrograd with the count it had
        # before the load; not drawn)
        state = {k: v for k, v in state.items() if r.random() >= drop_p or "num_batches" in k}
        state.update({e: np.zeros(1) for e in chosen})
        order = r.permutation(len(state))
        items = list(state.items())
        state = {items[i][0]: lib.tensor(items[i][1]) for i in order}
        result = model.load_state_dict(state, strict=strict)
        keys = str((list(result.missing_keys), list(result.unexpected_keys)))
        return [keys, *(v for _, v in sorted(model.state_dict(keep_vars=True).items()))]

    return Trial(f"load keys drop={drop_p} extras={chosen} strict={strict} seed={seed}", fn)


@gen("hooks")
def _hooks(rng):
    draw = rng.random()
    if draw < 0.25:
        return _state_hooks(rng)
    if draw < 0.4:
        return _load_keys(rng)
    return _forward_hooks(rng)


# ---- gradient clipping and parameter vectors ------------------------------------------------


def _backward(lib, loss):
    """torch's ``backward()`` (gradients on the parameters) or retrograd's (a value)."""
    if lib is _torch():
        loss.backward()
        return None
    return loss.backward()


def _grads_of(lib, grads, params):
    if lib is _torch():
        return [p.grad for p in params]
    return [p.grad(grads) for p in params]


@gen("clip")
def _clip(rng):
    kind = str(_pick(rng, "norm", "norm", "norm", "value", "total", "vector"))
    dtype = str(_pick(rng, "float64", "float64", "float32"))
    shapes = [tuple(int(n) for n in rng.integers(1, 4, size=int(rng.integers(0, 3))))]
    shapes += [(int(rng.integers(1, 5)),) for _ in range(int(rng.integers(0, 3)))]
    arrays = [rng.standard_normal(s) * float(_pick(rng, 0.1, 1.0, 10.0)) for s in shapes]
    bad = _pick(rng, None, None, None, None, math.inf, -math.inf, math.nan)
    norm_type = _pick(rng, 2.0, 2, 1.0, 3.0, 0.5, math.inf, -math.inf, 0.0, -1.0, "inf")
    max_norm = float(_pick(rng, 1.0, 0.5, 100.0, 0.0, 1e-3))
    nonfinite = bool(rng.random() < 0.3)
    foreach = _pick(rng, None, True, False)
    clip_value = float(_pick(rng, 0.1, 1.0, 0.0, 5.0))
    unused = bool(rng.random() < 0.2)  # a parameter without a gradient
    given_as = str(_pick(rng, "list", "list", "generator", "tensor"))
    norm_as_tensor = bool(rng.random() < 0.2)

    def fn(lib):
        dt = getattr(lib, dtype)
        params = [lib.tensor(a, dtype=dt, requires_grad=True) for a in arrays]
        extra = lib.tensor(np.ones(2), dtype=dt, requires_grad=True)
        loss = sum(((p * p).sum() * (k + 1) + p.sum()) for k, p in enumerate(params))
        if bad is not None:
            loss = loss + params[0].reshape(-1)[0] * bad
        listed = params + ([extra] if unused else [])
        if kind == "vector":
            vec = lib.nn.utils.parameters_to_vector(listed)
            target = [lib.tensor(np.zeros_like(a), dtype=dt) for a in arrays]
            lib.nn.utils.vector_to_parameters(vec.detach() * 2.0, target)
            (g,) = lib.autograd.grad((vec * vec).sum(), [params[0]])
            return [vec, *target, g]
        grads = _backward(lib, loss)
        nt = float(norm_type) if norm_type == "inf" else norm_type
        if given_as == "generator":
            clipped = (p for p in listed)
        elif given_as == "tensor":
            clipped = listed[0]
        else:
            clipped = listed
        if kind == "norm":
            total = lib.nn.utils.clip_grad_norm_(
                *([] if grads is None else [grads]),
                clipped,
                lib.tensor(max_norm) if norm_as_tensor else max_norm,
                norm_type=nt,
                error_if_nonfinite=nonfinite,
                foreach=foreach,
            )
            total = lib.tensor([float(total)], dtype=dt)  # (float32: its tolerance)
        elif kind == "value":
            lib.nn.utils.clip_grad_value_(
                *([] if grads is None else [grads]), clipped, clip_value, foreach=foreach
            )
            total = None
        else:
            given = [g for g in _grads_of(lib, grads, listed) if g is not None]
            total = lib.nn.utils.get_total_norm(given, nt, error_if_nonfinite=nonfinite)
            lib.nn.utils.clip_grads_with_norm_(
                *([] if grads is None else [grads]), listed, max_norm, total
            )
        after = [g for g in _grads_of(lib, grads, listed) if g is not None]
        return [total, *after]

    name = (
        f"clip {kind} {dtype} shapes={shapes} bad={bad} norm_type={norm_type} "
        f"max_norm={max_norm} nonfinite={nonfinite} foreach={foreach} value={clip_value} "
        f"unused={unused} given_as={given_as} norm_as_tensor={norm_as_tensor}"
    )
    return Trial(name, fn, 1e-9)


# ---- packed sequences through recurrent layers ------------------------------------------------


@gen("packed")
def _packed(rng):
    kind = str(_pick(rng, "LSTM", "GRU", "RNN", "none"))
    batch = int(rng.integers(1, 5))
    lengths = [int(n) for n in rng.integers(1, 6, size=batch)]
    if rng.random() < 0.05:
        lengths[int(rng.integers(batch))] = 0  # refused by both
    enforce = bool(rng.random() < 0.4)
    if enforce and rng.random() < 0.7:
        lengths = sorted(lengths, reverse=True)
    batch_first = bool(rng.random() < 0.5)
    form = str(_pick(rng, "padded", "padded", "sequence", "pad_sequence", "unpad", "unpack"))
    tensor_lengths = bool(rng.random() < 0.3)
    total = _pick(rng, None, None, max(lengths), max(lengths) + 2, max(lengths) - 1)
    padding_value = float(_pick(rng, 0.0, -1.0, 2.5))
    side = str(_pick(rng, "right", "right", "left"))
    layers = int(_pick(rng, 1, 2))
    bidirectional = bool(rng.random() < 0.4)
    hx = bool(rng.random() < 0.4)
    features = 3
    seqs = [rng.standard_normal((n, features)) for n in lengths]
    padded = np.zeros((max(lengths), batch, features))
    for b, s in enumerate(seqs):
        padded[: len(s), b] = s
    hidden = rng.standard_normal((layers * (2 if bidirectional else 1), batch, 2))
    state: dict = {}

    def fn(lib):
        torch = _torch()
        utils = lib.nn.utils.rnn
        if form == "pad_sequence":
            ts = [lib.tensor(s) for s in seqs]
            kw = {} if side == "right" else {"padding_side": side}
            return [utils.pad_sequence(ts, batch_first, padding_value, **kw)]
        x = lib.tensor(padded.transpose(1, 0, 2) if batch_first else padded, requires_grad=True)
        if form == "unpad":
            # (torch's unpad_sequence transposes its input in place when not batch_first, which
            # torch refuses on a leaf and which changes the caller's tensor: a torch bug, kept
            # out by giving it a copy)
            parts = utils.unpad_sequence(x * 1.0, lib.tensor(lengths), batch_first)
            return [*parts, *_grad(lib, sum((p * p).sum() for p in parts), [x])]
        if form == "unpack":
            ts = [lib.tensor(s, requires_grad=True) for s in seqs]
            parts = utils.unpack_sequence(utils.pack_sequence(ts, enforce_sorted=enforce))
            return [*parts, *_grad(lib, sum((p * p).sum() for p in parts), ts)]
        if form == "sequence":
            parts = [
                x[b, : lengths[b]] if batch_first else x[: lengths[b], b] for b in range(batch)
            ]
            packed = utils.pack_sequence(parts, enforce_sorted=enforce)
        else:
            ls = lib.tensor(lengths) if tensor_lengths else lengths
            packed = utils.pack_padded_sequence(x, ls, batch_first, enforce)
        out = [packed.data, packed.batch_sizes]
        out += [packed.sorted_indices, packed.unsorted_indices]
        if kind == "none":
            seq = packed
            finals = []
        else:
            if lib is torch:
                torch.manual_seed(0)
            m = getattr(lib.nn, kind)(
                features, 2, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first
            ).double()
            if lib is torch:
                state.update({k: v.detach().numpy().copy() for k, v in m.state_dict().items()})
            else:
                m.load_state_dict({k: rg.tensor(v) for k, v in state.items()})
            h0 = None
            if hx:
                h = lib.tensor(hidden, requires_grad=True)
                h0 = (h, h * 0.5) if kind == "LSTM" else h
            seq, finals = m(packed, h0)
            finals = list(finals) if isinstance(finals, tuple) else [finals]
        y, ls = utils.pad_packed_sequence(
            seq, batch_first=batch_first, padding_value=padding_value, total_length=total
        )
        out += [y, ls, *finals]
        if kind == "none":
            return [o for o in out if o is not None]
        loss = (y * y).sum() + sum((h * 1.5).sum() for h in finals)
        params = list(m.parameters())
        grads = _grad(lib, loss, [x, *params])
        return [o for o in out if o is not None] + grads

    name = (
        f"packed {kind} form={form} lengths={lengths} enforce={enforce} bf={batch_first} "
        f"tensor_lengths={tensor_lengths} total={total} pad={padding_value} side={side} "
        f"layers={layers} bi={bidirectional} hx={hx}"
    )
    return Trial(name, fn, 1e-8)


# ---- reparametrizations: weight/spectral norm, parametrize, prune ----------------------------


def _reparam_grads(lib, m, xa):
    x = lib.tensor(xa, requires_grad=True)
    y = m(x)
    w = lib.tensor(np.arange(float(np.prod(y.shape))).reshape(tuple(y.shape)) / 7.0)
    loss = (y * w).sum()
    params = [p for _, p in sorted(m.named_parameters())]
    names = sorted(n for n, _ in m.named_parameters())
    return [y, str(names), *_grad(lib, loss, [x, *params])]


def _conv_or_linear(lib, layer, seed):
    r = np.random.default_rng(seed)
    if layer == "linear":
        m = lib.nn.Linear(4, 3).double()
    elif layer == "conv":
        m = lib.nn.Conv1d(2, 3, 2).double()
    else:
        m = lib.nn.ConvTranspose1d(2, 3, 2).double()
    shapes = {k: tuple(v.shape) for k, v in m.state_dict().items()}
    m.load_state_dict({k: lib.tensor(r.standard_normal(shape)) for k, shape in shapes.items()})
    return m


@gen("reparam")
def _reparam(rng):
    kinds = ("weight_norm", "weight_norm", "spectral_norm", "parametrize", "prune", "fuse")
    kind = str(_pick(rng, *kinds))
    layer = str(_pick(rng, "linear", "linear", "conv", "transpose"))
    xa = rng.standard_normal((2, 4) if layer == "linear" else (2, 2, 4))
    if kind == "weight_norm":
        form = str(_pick(rng, "hook", "parametrization"))
        dim = _pick(rng, 0, 1, -1, None, 2, -2, 3, -3)
        name = str(_pick(rng, "weight", "weight", "bias"))
        remove = bool(rng.random() < 0.3)

        def fn(lib):
            m = _conv_or_linear(lib, layer, 7)
            utils = lib.nn.utils
            if form == "hook":
                utils.weight_norm(m, name, dim=dim)
            else:
                utils.parametrizations.weight_norm(m, name, dim=dim)
            out = [str(sorted(m.state_dict()))]
            if remove:
                if form == "hook":
                    utils.remove_weight_norm(m, name)
                else:
                    utils.parametrize.remove_parametrizations(m, name)
            return out + _reparam_grads(lib, m, xa)

        return Trial(f"weight_norm {form} {layer} {name} dim={dim} remove={remove}", fn)
    if kind == "spectral_norm":
        form = str(_pick(rng, "hook", "parametrization"))
        dim = _pick(rng, None, 0, 1)
        # (the power iteration starts from a random vector: enough iterations that either
        # library's converges to the same largest singular value)
        iterations = 60

        def fn(lib):
            m = _conv_or_linear(lib, layer, 8)
            utils = lib.nn.utils
            if lib is _torch():
                lib.manual_seed(0)
            forms = {"hook": utils, "parametrization": utils.parametrizations}
            spectral = forms[form].spectral_norm
            spectral(m, n_power_iterations=iterations, dim=dim)
            names = sorted(m.state_dict())
            y = m(lib.tensor(xa))  # (training: the iterations run)
            m.eval()
            return [str(names), y, m(lib.tensor(xa))]

        return Trial(f"spectral_norm {form} {layer} dim={dim}", fn, 1e-6)
    if kind == "fuse":
        return _fuse(rng, layer, xa)
    if kind == "parametrize":
        right_inverse = bool(rng.random() < 0.6)
        unsafe = bool(rng.random() < 0.3)
        change = str(_pick(rng, "symmetric", "symmetric", "scale", "shape"))
        cached = bool(rng.random() < 0.4)
        leave = bool(rng.random() < 0.5)
        assign = bool(rng.random() < 0.5)
        w0 = rng.standard_normal((3, 3))
        w1 = rng.standard_normal((3, 3))

        def make(lib):
            class Symmetric(lib.nn.Module):
                def forward(self, w):
                    return w.triu() + w.triu(1).transpose(-1, -2)

            class Scale(lib.nn.Module):
                def forward(self, w):
                    return w * 2.0

            class Flat(lib.nn.Module):
                def forward(self, w):
                    return w.reshape(-1)

            cls = {"symmetric": Symmetric, "scale": Scale, "shape": Flat}[change]
            if right_inverse:
                inverse = {
                    "symmetric": lambda self, a: a.triu(),
                    "scale": lambda self, a: a / 2.0,
                    "shape": lambda self, a: a.reshape(3, 3),
                }[change]
                cls = type(cls.__name__, (cls,), {"right_inverse": inverse})
            return cls()

        def fn(lib):
            m = lib.nn.Linear(3, 3).double()
            m.load_state_dict({"weight": lib.tensor(w0), "bias": lib.tensor(np.ones(3))})
            param = lib.nn.utils.parametrize
            param.register_parametrization(m, "weight", make(lib), unsafe=unsafe)
            out = [m.weight, str(sorted(m.state_dict())), m.parametrizations.weight.original]
            if assign:
                m.weight = lib.tensor(w1)
                out += [m.weight, m.parametrizations.weight.original]
            x = lib.tensor(np.ones((2, 3)))
            if cached:
                with param.cached():
                    y = m(x) + m(x)
            else:
                y = m(x)
            out += [y, str(param.is_parametrized(m)), str(param.is_parametrized(m, "bias"))]
            param.remove_parametrizations(m, "weight", leave_parametrized=leave)
            return [*out, m.weight, str(sorted(m.state_dict()))]

        name = (
            f"parametrize {change} right_inverse={right_inverse} unsafe={unsafe} "
            f"cached={cached} leave={leave} assign={assign}"
        )
        return Trial(name, fn)
    # pruning
    method = str(_pick(rng, "l1", "l1", "random", "ln", "global", "custom", "identity"))
    amount = _pick(rng, 0.3, 0.5, 0.0, 1.0, 2, 0, 5, 13, 30, -1, 1.5)
    name = str(_pick(rng, "weight", "weight", "bias"))
    twice = bool(rng.random() < 0.3)
    remove = bool(rng.random() < 0.4)
    n_norm = _pick(rng, 1, 2, math.inf)
    dim = int(_pick(rng, 0, 1, -1))
    mask = rng.random(3) < 0.5

    def fn(lib):
        import torch.nn.utils.prune  # noqa: F401  (torch's is not imported by torch.nn.utils)

        prune = lib.nn.utils.prune
        m = _conv_or_linear(lib, layer, 9)
        other = _conv_or_linear(lib, layer, 10)
        if lib is _torch():
            lib.manual_seed(0)
        for _ in range(2 if twice else 1):
            if method == "l1":
                prune.l1_unstructured(m, name, amount=amount)
            elif method == "random":
                prune.random_unstructured(m, name, amount=amount)
            elif method == "ln":
                prune.ln_structured(m, "weight", amount=amount, n=n_norm, dim=dim)
            elif method == "global":
                prune.global_unstructured(
                    [(m, "weight"), (other, "bias")],
                    pruning_method=prune.L1Unstructured,
                    amount=amount,
                )
            elif method == "custom":
                prune.custom_from_mask(m, "bias", mask=lib.tensor(mask.astype(float)))
            else:
                prune.identity(m, name)
        pruned = "weight" if method in ("ln", "global") else "bias" if method == "custom" else name
        keep = getattr(m, f"{pruned}_mask")
        # (random pruning draws its own cells: only how many is compared)
        out = [keep.sum()] if method == "random" else [keep, getattr(m, pruned)]
        out += [str(sorted(m.state_dict())), str(prune.is_pruned(m))]
        if remove:
            prune.remove(m, pruned)
            out.append(str(sorted(m.state_dict())))
        if method != "random":
            out += _reparam_grads(lib, m, xa)
        return out

    return Trial(
        f"prune {method} {layer} {name} amount={amount} twice={twice} remove={remove} "
        f"n={n_norm} dim={dim}",
        fn,
    )


def _fuse(rng, layer, xa):
    """``fuse_conv_bn_eval``/``fuse_linear_bn_eval`` (and the ``*_weights`` forms), against
    the layer followed by its batch norm in eval mode."""
    bias = bool(rng.random() < 0.7)
    training = bool(rng.random() < 0.1)  # torch refuses to fuse in training
    weights_form = bool(rng.random() < 0.3)
    r = rng.standard_normal(12)
    var = rng.random(3) + 0.25

    def fn(lib):
        nn = lib.nn
        if layer == "linear":
            m = nn.Linear(4, 3, bias=bias).double()
        elif layer == "conv":
            m = nn.Conv1d(2, 3, 2, bias=bias).double()
        else:
            m = nn.ConvTranspose1d(2, 3, 2, bias=bias).double()
        shapes = {k: tuple(v.shape) for k, v in m.state_dict().items()}
        m.load_state_dict(
            {
                k: lib.tensor(np.resize(r, int(np.prod(s))).reshape(s) * 0.7)
                for k, s in shapes.items()
            }
        )
        bn = nn.BatchNorm1d(3).double()
        bn.load_state_dict({
            "weight": lib.tensor(r[:3]), "bias": lib.tensor(r[3:6]),
            "running_mean": lib.tensor(r[6:9]), "running_var": lib.tensor(var),
            "num_batches_tracked": lib.tensor(5),
        })  # fmt: skip
        m.train(training)
        bn.train(training)
        utils = nn.utils
        transpose = layer == "transpose"
        if weights_form:
            b = None if m.bias is None else m.bias
            args = (m.weight, b, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias)
            if layer == "linear":
                return list(utils.fuse_linear_bn_weights(*args))
            return list(utils.fuse_conv_bn_weights(*args, transpose=transpose))
        if layer == "linear":
            fused = utils.fuse_linear_bn_eval(m, bn)
        else:
            fused = utils.fuse_conv_bn_eval(m, bn, transpose=transpose)
        x = lib.tensor(xa)
        return [fused(x), bn(m(x)), str(sorted(n for n, _ in fused.named_parameters()))]

    return Trial(f"fuse {layer} bias={bias} training={training} weights={weights_form}", fn, 1e-8)


# ---- mixed precision and functional_call ------------------------------------------------------


def _grad_scaler(rng):
    init = float(_pick(rng, 2.0**16, 8.0, 3.0, 1.0, 2.0**126, 0.75))
    growth = float(_pick(rng, 2.0, 1.5, 3.0))
    backoff = float(_pick(rng, 0.5, 0.25, 0.3))
    interval = int(_pick(rng, 1, 2, 3))
    steps = int(rng.integers(2, 7))
    bad = [_pick(rng, None, None, None, math.inf, math.nan, 1e30) for _ in range(steps)]
    dtype = str(_pick(rng, "float64", "float32"))
    unscale = bool(rng.random() < 0.5)
    clip = unscale and bool(rng.random() < 0.5)
    new_scale_at = int(rng.integers(steps)) if rng.random() < 0.2 else None
    new_scale = float(_pick(rng, 100.0, 0.1, 3.0))
    misuse = str(_pick(rng, *(["none"] * 6), "step_twice", "unscale_after_step", "unscale_twice",
                       "update_first", "closure", "state"))  # fmt: skip
    w0 = rng.standard_normal(3)

    def fn(lib):
        torch = lib is _torch()
        w = lib.tensor(w0, dtype=getattr(lib, dtype), requires_grad=True)
        opt = lib.optim.SGD([w], lr=0.1)
        sc = lib.amp.GradScaler(
            "cpu", init_scale=init, growth_factor=growth, backoff_factor=backoff,
            growth_interval=interval,
        )  # fmt: skip
        out: list = []
        if misuse == "update_first":
            sc.scale(w.sum())
            sc.update()
        for i, b in enumerate(bad):
            loss = (w * w).sum() * (1.0 if b is None else b)
            scaled = sc.scale(loss)
            out.append(scaled)
            if torch:
                opt.zero_grad()
                scaled.backward()
                grads = ()
            else:
                grads = (scaled.backward(),)
            if unscale:
                sc.unscale_(opt, *grads)
                if misuse == "unscale_twice":
                    sc.unscale_(opt, *grads)
                if clip:
                    lib.nn.utils.clip_grad_norm_(*grads, [w], 1.0)
            if misuse == "closure":
                sc.step(opt, *grads, closure=lambda: None)
            sc.step(opt, *grads)
            if misuse == "step_twice":
                sc.step(opt, *grads)
            if misuse == "unscale_after_step":
                sc.unscale_(opt, *grads)
            sc.update(new_scale if new_scale_at == i else None)
            out += [sc.get_scale(), w]
        if misuse == "state":
            state = sc.state_dict()
            out.append(str(sorted((k, float(v)) for k, v in state.items())))
            other = lib.amp.GradScaler("cpu")
            other.load_state_dict(state)
            out.append(other.get_scale())
        return out

    name = (
        f"GradScaler init={init} growth={growth} backoff={backoff} interval={interval} "
        f"bad={bad} {dtype} unscale={unscale} clip={clip} new_scale={new_scale_at}:{new_scale} "
        f"misuse={misuse}"
    )
    return Trial(name, fn)


#: ops torch's CPU autocast leaves in their inputs' dtype (neither lowered nor promoted)
_AUTOCAST_KEPT = ("add", "mul", "tanh", "relu", "sum", "neg", "abs", "max", "cat")


def _autocast(rng):
    ops = [str(_pick(rng, *_AUTOCAST_KEPT)) for _ in range(int(rng.integers(1, 5)))]
    dtype = str(_pick(rng, "float64", "float32"))
    enabled = bool(rng.random() < 0.5)
    lowered = bool(rng.random() < 0.3)  # a lowered op inside a disabled block
    decorator = bool(rng.random() < 0.3)
    xa = rng.standard_normal((2, 3))
    wa = rng.standard_normal((3, 3))

    def fn(lib):
        x = lib.tensor(xa, dtype=getattr(lib, dtype), requires_grad=True)
        w = lib.tensor(wa, dtype=getattr(lib, dtype))

        def body(x):
            y = x
            for op in ops:
                if op == "add":
                    y = y + x
                elif op == "mul":
                    y = y * x
                elif op == "sum":
                    y = y + y.sum()
                elif op == "max":
                    y = y + y.max()
                elif op == "cat":
                    y = lib.cat([y, x], 0)[: y.shape[0]]
                else:
                    y = getattr(lib, op)(y)
            if lowered and not enabled:
                y = y @ w
            return y

        ctx = lib.autocast("cpu", dtype=lib.bfloat16, enabled=enabled)
        y = ctx(body)(x) if decorator else _in(ctx, body, x)
        (g,) = lib.autograd.grad((y * y).sum(), [x])
        return [y, g]

    return Trial(
        f"autocast {ops} {dtype} enabled={enabled} lowered={lowered} decorator={decorator}", fn
    )


def _in(ctx, body, x):
    with ctx:
        return body(x)


def _functional_call(rng):
    tied = bool(rng.random() < 0.4)
    tie_weights = bool(rng.random() < 0.7)
    strict = bool(rng.random() < 0.3)
    which = str(_pick(rng, "all", "some", "tied_one", "tied_both", "extra", "none_bias"))
    buffers = str(_pick(rng, "none", "separate", "merged", "duplicate"))
    train = bool(rng.random() < 0.6)
    as_tuple = bool(rng.random() < 0.5)
    xa = rng.standard_normal((4, 3))
    seeds = {k: int(rng.integers(1000)) for k in range(12)}

    def fn(lib):
        class Net(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = _linear(lib, 3, 3, 11)
                self.b = _linear(lib, 3, 3, 12)
                self.bn = lib.nn.BatchNorm1d(3).double()
                if tied:
                    self.b.weight = self.a.weight

            def forward(self, x):
                return self.bn(self.b(self.a(x).tanh()))

        m = Net()
        m.train(train)
        names = [n for n, _ in m.named_parameters(remove_duplicate=False)]
        shapes = dict((n, tuple(p.shape)) for n, p in m.named_parameters(remove_duplicate=False))
        params = {
            n: lib.tensor(np.random.default_rng(seeds[k]).standard_normal(shapes[n]),
                          requires_grad=True)
            for k, n in enumerate(names)
        }  # fmt: skip
        if which == "some":
            params = {n: params[n] for n in ("a.bias", "bn.weight")}
        elif which == "tied_one":
            params = {"a.weight": params["a.weight"]}
        elif which == "tied_both":
            params = {"a.weight": params["a.weight"], "b.weight": params["b.weight"]}
        elif which == "extra":
            params = {**params, "c.zz": lib.tensor(np.ones(2))}
        elif which == "none_bias":
            params = {"a.bias": None}
        bufs = {
            "bn.running_mean": lib.tensor(np.zeros(3)),
            "bn.running_var": lib.tensor(np.full(3, 2.0)),
        }
        if buffers == "merged":
            given = {**params, **bufs}
        elif buffers == "separate":
            given = (params, bufs)
        elif buffers == "duplicate":
            given = (params, {**bufs, "a.bias": lib.tensor(np.zeros(3))})
        else:
            given = params
        fc = lib.func.functional_call
        x = lib.tensor(xa)
        y = fc(m, given, (x,) if as_tuple else x, tie_weights=tie_weights, strict=strict)
        leaves = [p for p in params.values() if p is not None and p.requires_grad]
        out = [y, *_grad(lib, (y * y).sum(), leaves)] if leaves else [y]
        out += [bufs["bn.running_mean"], m.bn.running_mean, m.a.weight, m.b.weight]
        out.append(str(int(m.bn.num_batches_tracked)))
        return out

    name = (
        f"functional_call tied={tied} tie_weights={tie_weights} strict={strict} {which} "
        f"buffers={buffers} train={train}"
    )
    return Trial(name, fn)


def _stack_module_state(rng):
    count = int(rng.integers(1, 4))
    mode = str(_pick(rng, "same", "same", "mixed_mode", "mixed_class", "frozen", "empty"))
    seeds = [int(s) for s in rng.integers(1000, size=max(count, 1))]

    def fn(lib):
        if mode == "empty":
            models = []
        else:
            models = [
                lib.nn.Sequential(_linear(lib, 2, 3, s), lib.nn.BatchNorm1d(3).double())
                for s in seeds
            ]
        if mode == "mixed_mode" and len(models) > 1:
            models[-1].eval()
        if mode == "mixed_class" and len(models) > 1:
            models[-1] = lib.nn.Linear(2, 3)
        if mode == "frozen" and len(models) > 1:
            models[0][0].weight.requires_grad_(False)
        params, buffers = lib.func.stack_module_state(models)
        out = []
        for d in (params, buffers):
            for k in sorted(d):
                out += [k, d[k], str(d[k].requires_grad)]
        x = lib.tensor(np.ones((4, 2)))
        y = lib.func.functional_call(models[0], ({k: v[0] for k, v in params.items()},), (x,))
        return [*out, y]

    return Trial(f"stack_module_state {count} {mode}", fn)


@gen("amp")
def _amp(rng):
    kind = str(_pick(rng, "scaler", "scaler", "autocast", "functional_call", "functional_call",
                     "stack"))  # fmt: skip
    if kind == "scaler":
        return _grad_scaler(rng)
    if kind == "autocast":
        return _autocast(rng)
    if kind == "functional_call":
        return _functional_call(rng)
    return _stack_module_state(rng)
