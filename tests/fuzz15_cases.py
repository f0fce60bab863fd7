"""Round 15 of the differential fuzzer against PyTorch: what rounds 1-14 do not draw, or draw
only on a fixed list of forms. Each generator takes a ``numpy`` generator and returns a
:class:`fuzz12_cases.Trial` written once against a namespace ``lib`` (``torch`` or
``retrograd``); :func:`fuzz14_cases.check` runs it on both and raises
:class:`fuzz_cases.Mismatch` on the first difference in raising or not, dtype, shape or value.

- ``vmap``: ``func.vmap`` over random bodies of elementwise, reduction, indexing, shape,
  softmax, cumulative, matmul, gather/scatter, convolution and in-place ops, with random
  ``in_dims`` (negative, ``None``, per argument), ``out_dims`` (negative, per output),
  ``chunk_size``, nested vmaps and out-of-range dims that must raise; float64 gradients
  through the vmap;
- ``transforms``: ``func.grad``/``grad_and_value``/``jacrev``/``jacfwd``/``hessian``/
  ``jvp``/``vjp`` on random bodies with ``argnums`` (ints and tuples), ``has_aux``, and
  compositions (``jacfwd(jacrev)``, ``vmap(grad)``, ``grad(grad)``, ``jacrev(vmap)``);
- ``einsum``: equations drawn at random (repeated letters inside an operand, letters summed
  away, implicit outputs, ellipses that broadcast, one to three operands) in the string and
  the sublist forms, and equations both refuse (a letter twice in the output, an output
  letter no input has, size mismatches);
- ``sequences``: ``pad_sequence`` (``batch_first``, ``padding_value``, ``padding_side``),
  ``pack_padded_sequence``/``pad_packed_sequence`` (``enforce_sorted``, ``total_length``,
  ``batch_first``), ``pack_sequence``, ``unpad_sequence``/``unpack_sequence``, with
  gradients through the packing, and their refusals;
- ``layers``: ``nn`` modules no round builds (``Bilinear``, ``RMSNorm``, ``GroupNorm``,
  ``LayerNorm`` without bias, ``Fold``/``Unfold``, ``Unflatten``, padding modules in every
  mode and dimension, ``Upsample``, ``CosineSimilarity``/``PairwiseDistance``,
  ``Softmax2d``, ``LocalResponseNorm``, ``ChannelShuffle``, parametrized activations,
  ``weight_norm``), outputs and float64 gradients of input and parameters;
- ``recurrent``: ``RNN``/``GRU``/``LSTM`` over ``num_layers``, ``bidirectional``,
  ``batch_first``, ``bias``, given or default initial states, unbatched inputs and packed
  sequences (sorted or not), and the cells (no ``proj_size`` drawn: LSTM projections are
  checked in ``test_realports9_fixes.py``);
- ``half``: float16 and bfloat16 tensors through elementwise, reduction, cast, normalization
  and loss ops beside tensors of every other dtype, 0-d tensors and Python scalars: result
  dtypes, values (to half precision) and the dtypes and values of the gradients (the torch
  inner backend only: NumPy refuses half precision, see ``tests/test_fuzz15.py``).

Known differences are left out of the draws and named where they are.
"""

from __future__ import annotations

import numpy as np

from fuzz12_cases import Trial, _leaves, _pick, _run_module
from fuzz14_cases import _grads, _weight_fn, check

__all__ = ["GENERATORS", "check"]

GENERATORS: dict = {}


def gen(name):
    def register(fn):
        GENERATORS[name] = fn
        return fn

    return register


def _shape(rng, rmin=0, rmax=3, lo=1, hi=4):
    return tuple(int(v) for v in rng.integers(lo, hi, size=int(rng.integers(rmin, rmax + 1))))


def _trial(name, body, weight, rtol=1e-9):
    """body(lib) -> (results, leaves); the results, then the gradients of their float ones."""

    def fn(lib):
        results, leaves = body(lib)
        results = _leaves(results)
        tensors = [r for r in results if isinstance(r, lib.Tensor)]
        grads = _grads(lib, tensors, leaves, weight)
        # (a leaf the results do not reach: torch's None, or zeros to rounding where
        # retrograd's graph still passes through it, both as zeros)
        leaves = [x for x in leaves if x.requires_grad]
        grads = [lib.zeros_like(x) if g is None else g for g, x in zip(grads, leaves)]
        return [*results, *grads]

    return Trial(name, fn, rtol=rtol)


# ---- vmap --------------------------------------------------------------------------------

# per-sample bodies: (name, arity, minimum sample rank, body(lib, *args))
VMAP_BODIES = [
    ("exp2", 1, 0, lambda lib, a: a.exp() * 2),
    ("sum", 1, 0, lambda lib, a: a.sum()),
    ("mul_sum", 2, 0, lambda lib, a, b: (a * b).sum()),
    ("sin_add", 2, 0, lambda lib, a, b: a.sin() + b),
    ("two_outs", 2, 1, lambda lib, a, b: (a.tanh(), (a * b).sum(-1))),
    ("softmax", 1, 1, lambda lib, a: a.softmax(-1)),
    ("log_softmax0", 1, 1, lambda lib, a: lib.log_softmax(a, 0)),
    ("cumsum", 1, 1, lambda lib, a: a.cumsum(0)),
    ("cumprod", 1, 1, lambda lib, a: a.cumprod(-1)),
    ("transpose", 1, 2, lambda lib, a: a.transpose(0, -1) * 1.5),
    ("max_dim", 1, 1, lambda lib, a: a.max(-1).values),
    ("argmax", 1, 1, lambda lib, a: (a.argmax(0), a.amax(0))),
    ("index0", 1, 1, lambda lib, a: a[0] - a[-1]),
    ("slice", 1, 1, lambda lib, a: a[..., 1:] * a[..., :1]),
    ("mean_mul", 2, 0, lambda lib, a, b: a.mean() * b),
    ("matmul", 2, 2, lambda lib, a, b: a @ b.transpose(-1, -2)),
    ("dot", 2, 1, lambda lib, a, b: lib.dot(a.flatten(), b.flatten())),
    ("where", 2, 0, lambda lib, a, b: lib.where(a > b, a, b * b)),
    ("clamp", 1, 0, lambda lib, a: a.clamp(-0.5, 0.7)),
    ("norm", 1, 1, lambda lib, a: a.norm(dim=-1)),
    ("var", 1, 1, lambda lib, a: a.var(0)),
    ("sort", 1, 1, lambda lib, a: a.sort(-1, descending=True).values),
    ("flip_roll", 1, 1, lambda lib, a: a.flip(0).roll(1, 0)),
    ("reshape", 1, 1, lambda lib, a: a.reshape(-1).unsqueeze(0)),
    ("stack", 2, 0, lambda lib, a, b: lib.stack([a, b], 0)),
    ("cat", 2, 1, lambda lib, a, b: lib.cat([a, b], -1)),
    ("inplace", 2, 0, lambda lib, a, b: (a * 1.0).mul_(b).add_(1.0)),
    ("setitem", 2, 1, lambda lib, a, b: _vmap_setitem(a, b)),
    ("logsumexp", 1, 1, lambda lib, a: a.logsumexp(-1)),
    ("pow", 2, 0, lambda lib, a, b: a.abs().add(0.5).pow(b)),
    ("expand", 1, 0, lambda lib, a: a.unsqueeze(0).expand(2, *a.shape) * 0.5),
    ("outer", 2, 1, lambda lib, a, b: lib.outer(a.flatten(), b.flatten())),
    ("linear", 2, 1, lambda lib, a, b: _linear(lib, a, b)),
    ("constant", 1, 0, lambda lib, a: lib.ones_like(a) * a.sum()),
    ("layer_norm", 1, 1, lambda lib, a: lib.nn.functional.layer_norm(a, a.shape[-1:])),
    ("gather", 1, 1, lambda lib, a: a.gather(-1, lib.zeros(a.shape, dtype=lib.int64))),
    ("index_select", 1, 1, lambda lib, a: a.index_select(0, lib.tensor([0, 0]))),
    ("masked_fill", 1, 0, lambda lib, a: a.masked_fill(a > 0.3, -1.0)),
    ("topk", 1, 1, lambda lib, a: a.topk(1, -1).values),
    ("diagonal", 1, 2, lambda lib, a: a.diagonal(0, 0, 1) * 2),
    ("triu", 1, 2, lambda lib, a: a.triu(1) - a.tril()),
    ("einsum", 2, 1, lambda lib, a, b: lib.einsum("...i,...i->...", a, b)),
    ("split", 1, 1, lambda lib, a: a.split(1, -1)[0] * a.unbind(-1)[-1].unsqueeze(-1)),
    ("conv1d", 2, 1, lambda lib, a, b: _conv1d(lib, a, b)),
    ("scatter_add", 2, 1, lambda lib, a, b: a.scatter_add(-1, lib.zeros_like(b).long(), b)),
    ("amin_argmin", 1, 1, lambda lib, a: (a.amin(-1, keepdim=True), a.argmin(-1))),
    ("std", 1, 1, lambda lib, a: a.std(-1, correction=0)),
    ("prod_dim", 1, 1, lambda lib, a: a.prod(0)),
    ("normalize", 1, 1, lambda lib, a: lib.nn.functional.normalize(a, dim=-1)),
]  # fmt: skip


def _conv1d(lib, a, b):
    w = b.reshape(1, 1, -1)[..., :1]
    return lib.nn.functional.conv1d(a.reshape(1, 1, -1), w, padding=1)


def _linear(lib, a, b):
    return lib.nn.functional.linear(a, b.reshape(1, -1)[:, : a.shape[-1]])


def _vmap_setitem(a, b):
    out = a * 1.0
    out[0] = b[0] * 2
    return out


@gen("vmap")
def _vmap(rng):
    name, arity, rmin, body = VMAP_BODIES[int(rng.integers(len(VMAP_BODIES)))]
    sample = _shape(rng, rmin, max(rmin, 2), 1, 4)
    if name in ("matmul", "linear", "dot", "outer"):
        sample = _shape(rng, rmin, rmin, 2, 4)
    nested = rng.random() < 0.3
    sizes = [int(rng.integers(1, 4))] + ([int(rng.integers(1, 4))] if nested else [])

    def in_dims_for(level_rank):
        """One in_dim per argument (int, negative, or None), at least one batched."""
        dims = [
            None if rng.random() < 0.25 else int(rng.integers(-(level_rank + 1), level_rank + 1))
            for _ in range(arity)
        ]
        if all(d is None for d in dims):
            dims[0] = 0
        if rng.random() < 0.05:  # out of range: both refuse
            dims[0] = level_rank + 2
        return dims

    inner_dims = in_dims_for(len(sample))
    outer_dims = in_dims_for(len(sample) + 1) if nested else None
    shapes = []
    for k in range(arity):
        shape = list(sample)
        if inner_dims[k] is not None:
            d = inner_dims[k] if inner_dims[k] >= 0 else len(shape) + 1 + inner_dims[k]
            shape.insert(min(max(d, 0), len(shape)), sizes[0])
        if nested:
            if inner_dims[k] is None:
                outer_dims[k] = None if rng.random() < 0.5 else outer_dims[k]
            if outer_dims[k] is not None:
                d = outer_dims[k] if outer_dims[k] >= 0 else len(shape) + 1 + outer_dims[k]
                shape.insert(min(max(d, 0), len(shape)), sizes[1])
        shapes.append(tuple(shape))
    if nested and all(d is None for d in outer_dims):
        outer_dims[0] = 0
        shapes[0] = (sizes[1], *shapes[0])
    if name in ("inplace", "setitem") and (
        inner_dims[0] is None or (nested and outer_dims[0] is None)
    ):
        # torch refuses an in-place write of a mapped value into an unmapped one (its batching
        # rule cannot hold it); retrograd's vmap is a loop, where each write is a plain one
        name, arity, rmin, body = "sin_add", 2, 0, VMAP_BODIES[3][3]
    arrays = [rng.uniform(-1.5, 1.5, size=s) for s in shapes]
    out_dims = _pick(rng, 0, -1, 1, "tuple")
    chunk = _pick(rng, None, None, 1, 2)
    if out_dims in (-1, 1) and None in inner_dims:
        # torch's vmap crashes (a wrong size, a garbage size, or a segmentation fault)
        # stacking an output that no mapped input reaches along an out_dims other than 0:
        # those only where every input is mapped
        out_dims = 0
    if (
        out_dims == "tuple"
        and chunk is not None
        and name not in ("two_outs", "argmax", "amin_argmin")
    ):
        # torch takes out_dims=(0,) for a lone tensor output, but not under chunk_size (an
        # AssertionError from its chunked path)
        chunk = None
    outer_out = 0 if nested and None in outer_dims else _pick(rng, 0, -1, 1)
    as_tuple = rng.random() < 0.5

    def body_fn(lib):
        leaves = [lib.tensor(a, requires_grad=True) for a in arrays]
        f = lambda *xs: body(lib, *xs)  # noqa: E731
        first = tuple(inner_dims) if as_tuple or arity > 1 else inner_dims[0]
        od = out_dims
        if od == "tuple":
            two = name in ("two_outs", "argmax", "amin_argmin")
            od = (0, 0 if None in inner_dims else -1) if two else (0,)
        f = lib.func.vmap(f, in_dims=first, out_dims=od, chunk_size=chunk)
        if nested:
            f = lib.func.vmap(f, in_dims=tuple(outer_dims), out_dims=outer_out)
        return [f(*leaves)], leaves

    return _trial(
        f"vmap {name} shapes={shapes} in_dims={inner_dims} outer={outer_dims} "
        f"out_dims={out_dims} outer_out={outer_out if nested else None} chunk={chunk}",
        body_fn,
        _weight_fn(rng),
    )


# ---- function transforms -----------------------------------------------------------------

# (name, arity, body(lib, x, y) -> output) over x of shape (n,), y of shape (n,)
TRANSFORM_BODIES = [
    ("sin_prod", lambda lib, x, y: (x.sin() * y).sum()),
    ("tanh_outer", lambda lib, x, y: lib.outer(x, y).tanh().sum()),
    ("softmax_dot", lambda lib, x, y: (x.softmax(0) * y.exp()).sum()),
    ("cumsum", lambda lib, x, y: (x.cumsum(0) * y).pow(2).sum()),
    ("logsumexp", lambda lib, x, y: (x + y).logsumexp(0)),
    ("norm", lambda lib, x, y: (x - y).norm()),
    ("prod", lambda lib, x, y: (x * y + 2.0).prod()),
    ("max", lambda lib, x, y: (x * y).max()),
    ("sigmoid_mean", lambda lib, x, y: (x.sigmoid() * y.cos()).mean()),
    ("matvec", lambda lib, x, y: (lib.outer(x, x) @ y).sin().sum()),
]  # fmt: skip


@gen("transforms")
def _transforms(rng):
    bname, body = TRANSFORM_BODIES[int(rng.integers(len(TRANSFORM_BODIES)))]
    n = int(rng.integers(1, 4))
    xa, ya = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    va = rng.uniform(-1, 1, n)
    form = _pick(rng, "grad", "grad_and_value", "jacrev", "jacfwd", "hessian", "jvp", "vjp",
                 "jacfwd_jacrev", "vmap_grad", "grad_grad", "jacrev_vmap", "jacrev_vector",
                 "hessian_jacfwd")  # fmt: skip
    argnums = _pick(rng, 0, 1, (0, 1), (1, 0), -1)
    if argnums == -1 and form in ("jacfwd", "hessian", "hessian_jacfwd"):
        # torch's jacfwd (and hessian, jacfwd of jacrev) with a negative argnums returns zeros
        # (a torch bug: grad and jacrev read argnums=-1 as the last argument)
        argnums = 1
    aux = rng.random() < 0.3 and form in ("grad", "grad_and_value", "jacrev", "jacfwd")

    def body_fn(lib):
        x = lib.tensor(xa, requires_grad=True)
        y = lib.tensor(ya, requires_grad=True)
        v = lib.tensor(va)
        tf = lib.func
        scalar = lambda a, b: body(lib, a, b)  # noqa: E731
        vector = lambda a, b: (a.sin() * body(lib, a, b), b.exp() * a.sum())  # noqa: E731
        if aux:
            f = lambda a, b: (scalar(a, b), a.cos() * 2)  # noqa: E731
        else:
            f = scalar
        if form == "grad":
            out = tf.grad(f, argnums=argnums, has_aux=aux)(x, y)
        elif form == "grad_and_value":
            out = tf.grad_and_value(f, argnums=argnums, has_aux=aux)(x, y)
        elif form == "jacrev":
            out = tf.jacrev(f, argnums=argnums, has_aux=aux)(x, y)
        elif form == "jacfwd":
            out = tf.jacfwd(f, argnums=argnums, has_aux=aux)(x, y)
        elif form == "hessian":
            out = tf.hessian(scalar, argnums=argnums)(x, y)
        elif form == "jvp":
            out = tf.jvp(vector, (x, y), (v, v * 0.5))
        elif form == "vjp":
            primal, pull = tf.vjp(vector, x, y)
            out = (primal, pull((v, v.flip(0))))
        elif form == "jacfwd_jacrev":
            out = tf.jacfwd(tf.jacrev(scalar, argnums=argnums), argnums=0)(x, y)
        elif form == "vmap_grad":
            xs = lib.stack([x, x * 0.5, -x], 0)
            out = tf.vmap(tf.grad(scalar, argnums=argnums), in_dims=(0, None))(xs, y)
        elif form == "grad_grad":
            inner = lambda a, b: tf.grad(scalar, argnums=0)(a, b).pow(2).sum()  # noqa: E731
            out = tf.grad(inner, argnums=argnums)(x, y)
        elif form == "jacrev_vmap":
            rows = lambda a, b: tf.vmap(lambda r: scalar(r, b))(lib.stack([a, a * a]))  # noqa: E731
            out = tf.jacrev(rows, argnums=argnums)(x, y)
        elif form == "jacrev_vector":
            out = tf.jacrev(vector, argnums=argnums)(x, y)
        else:
            out = tf.hessian(lambda a, b: tf.jacfwd(scalar)(a, b).sum(), argnums=argnums)(x, y)
        return [out], [x, y]

    return _trial(
        f"{form} {bname} n={n} argnums={argnums} aux={aux}", body_fn, _weight_fn(rng), rtol=1e-8
    )


# ---- einsum -------------------------------------------------------------------------------


@gen("einsum")
def _einsum(rng):
    letters = "abcdef"
    size = {c: int(_pick(rng, 1, 2, 3, 3, 0 if rng.random() < 0.1 else 2)) for c in letters}
    nops = int(rng.integers(1, 4))
    ell_shape = _shape(rng, 1, 2, 1, 3)
    use_ell = rng.random() < 0.3
    terms, shapes = [], []
    for _ in range(nops):
        k = int(rng.integers(0, 4))
        term = [str(c) for c in rng.choice(list(letters[:4]), size=k)]  # repeats allowed
        shape = [size[c] for c in term]
        if use_ell and rng.random() < 0.7:
            at = int(rng.integers(0, len(term) + 1))
            tail = ell_shape[len(ell_shape) - int(rng.integers(0, len(ell_shape) + 1)) :]
            tail = tuple(1 if rng.random() < 0.3 else s for s in tail)  # broadcast
            term.insert(at, "...")
            shape[at:at] = tail
        terms.append(term)
        shapes.append(tuple(shape))
    present = sorted({c for t in terms for c in t if c != "..."})
    explicit = rng.random() < 0.7
    if explicit:
        out = [c for c in present if rng.random() < 0.5]
        rng.shuffle(out)
        if use_ell and any("..." in t for t in terms) and rng.random() < 0.8:
            out.insert(int(rng.integers(0, len(out) + 1)), "...")
        if rng.random() < 0.05 and present:  # a letter twice in the output
            out.append(present[0])
            out.append(present[0])
        if rng.random() < 0.05:  # a letter no input has
            out.append("f")
    if rng.random() < 0.05 and shapes[0]:  # a size mismatch on a letter
        term = terms[0]
        k = next((i for i, c in enumerate(term) if c != "..."), None)
        if k is not None:
            shapes[0] = shapes[0][:k] + (size[term[k]] + 1,) + shapes[0][k + 1 :]
    equation = ",".join("".join(t) for t in terms) + ("->" + "".join(out) if explicit else "")
    sublist = rng.random() < 0.25 and not use_ell
    arrays = [rng.uniform(-1, 1, size=s) for s in shapes]
    # mostly float64; some int64 or float32 operands, alone or mixed (torch refuses a mix)
    dtypes = [str(_pick(rng, "float64", "float64", "float64", "float32", "int64")) for _ in shapes]
    if rng.random() < 0.7 or any(0 in sh for sh in shapes):
        # (not mixed with an empty operand: torch's kernels skip their dtype check then, as
        # fuzz11_cases' einsum notes)
        dtypes = [dtypes[0]] * len(shapes)

    def body(lib):
        xs = [
            lib.tensor(a if dt != "int64" else np.round(a * 3), dtype=getattr(lib, dt))
            for a, dt in zip(arrays, dtypes)
        ]
        for x in xs:
            if x.dtype == lib.float64:
                x.requires_grad_(True)
        if sublist:
            args = []
            for x, t in zip(xs, terms):
                args += [x, [letters.index(c) for c in t]]
            if explicit:
                args.append([letters.index(c) for c in out])
            return [lib.einsum(*args)], xs
        return [lib.einsum(equation, *xs)], xs

    return _trial(
        f"einsum {equation!r} {shapes} {dtypes} sublist={sublist}",
        body,
        _weight_fn(rng),
        rtol=1e-5 if "float32" in dtypes else 1e-9,
    )


# ---- sequences ---------------------------------------------------------------------------


@gen("sequences")
def _sequences(rng):
    batch = int(rng.integers(1, 4))
    lengths = [int(v) for v in rng.integers(1, 5, size=batch)]
    if rng.random() < 0.05:
        lengths[0] = 0  # an empty sequence: both refuse packing
    feat = _shape(rng, 0, 2, 1, 3)
    arrays = [rng.uniform(-1, 1, size=(n, *feat)) for n in lengths]
    form = _pick(rng, "pad", "pack_padded", "pack_sequence", "unpad", "unpack", "packed_ops")
    batch_first = bool(rng.random() < 0.5)
    value = float(_pick(rng, 0.0, -1.5, 7.0))
    side = _pick(rng, "right", "left")
    enforce = bool(rng.random() < 0.5)
    total = _pick(rng, None, max(lengths), max(lengths) + 2, max(lengths) - 1)
    lengths_kind = _pick(rng, "list", "tensor")
    sort = bool(rng.random() < 0.5)
    if sort:
        order = np.argsort(-np.array(lengths), kind="stable")
        lengths = [lengths[i] for i in order]
        arrays = [arrays[i] for i in order]

    def body(lib):
        rnn = lib.nn.utils.rnn
        xs = [lib.tensor(a, requires_grad=True) for a in arrays]
        lens = lengths if lengths_kind == "list" else lib.tensor(lengths)
        if form == "pad":
            out = rnn.pad_sequence(
                xs, batch_first=batch_first, padding_value=value, padding_side=side
            )
            return [out], xs
        if form == "unpad":
            padded = rnn.pad_sequence(xs, batch_first=batch_first)
            return [
                rnn.unpad_sequence(padded * 2, lib.tensor(lengths), batch_first=batch_first)
            ], xs
        if form == "pack_sequence":
            packed = rnn.pack_sequence(xs, enforce_sorted=enforce)
            return [packed.data, packed.batch_sizes, packed.sorted_indices], xs
        if form == "unpack":
            packed = rnn.pack_sequence(xs, enforce_sorted=enforce)
            return [rnn.unpack_sequence(packed)], xs
        padded = rnn.pad_sequence(xs, batch_first=batch_first)
        packed = rnn.pack_padded_sequence(padded, lens, batch_first=batch_first,
                                        enforce_sorted=enforce)  # fmt: skip
        if form == "packed_ops":  # packed.data read, changed and unpacked
            data = packed.data.tanh() * 3
            packed = rnn.PackedSequence(data, packed.batch_sizes, packed.sorted_indices,
                                      packed.unsorted_indices)  # fmt: skip
        out, out_lens = rnn.pad_packed_sequence(
            packed, batch_first=batch_first, padding_value=value, total_length=total
        )
        return [out, out_lens, packed.data, packed.batch_sizes, packed.unsorted_indices], xs

    return _trial(
        f"{form} lengths={lengths} feat={feat} batch_first={batch_first} value={value} "
        f"side={side} enforce_sorted={enforce} total_length={total} lengths as {lengths_kind}",
        body,
        _weight_fn(rng),
    )


# ---- modules -----------------------------------------------------------------------------


def _module_trial(name, shape, build, call, rng, rtol=1e-9):
    xa = rng.uniform(-1.5, 1.5, size=shape)
    state: dict = {}

    def fn(lib):
        return _run_module(lib, build, call, xa, state)

    return Trial(name, fn, rtol=rtol)


def _call(lib, m, x):
    return m(x)


@gen("layers")
def _layers(rng):
    c = lambda *v: _pick(rng, *v)  # noqa: E731
    kind = c("bilinear", "rms_norm", "group_norm", "layer_norm", "fold", "unfold", "unflatten",
             "pad", "upsample", "similarity", "softmax2d", "lrn", "channel_shuffle",
             "activation", "weight_norm")  # fmt: skip
    n = c(1, 2, 3)
    if kind == "bilinear":
        i1, i2, o = c(1, 2, 3), c(1, 2), c(1, 2, 3)
        bias = c(True, False)
        lead = _shape(rng, 0, 2, 1, 3)
        ya = rng.uniform(-1, 1, size=(*lead, i2))

        def call(lib, m, x):
            return m(x, lib.tensor(ya))

        return _module_trial(f"Bilinear({i1}, {i2}, {o}, bias={bias}) {lead}", (*lead, i1),
                             lambda nn: nn.Bilinear(i1, i2, o, bias=bias), call, rng)  # fmt: skip
    if kind in ("rms_norm", "layer_norm"):
        shape = _shape(rng, 1, 4, 1, 4)
        k = int(rng.integers(1, len(shape) + 1))
        norm = list(shape[-k:])
        norm_arg = norm if len(norm) > 1 or rng.random() < 0.5 else norm[0]
        affine = c(True, False)
        if kind == "rms_norm":
            eps = c(None, 1e-5, 0.5)
            build = lambda nn: nn.RMSNorm(norm_arg, eps=eps, elementwise_affine=affine)  # noqa: E731
            return _module_trial(f"RMSNorm({norm_arg}, eps={eps}, affine={affine}) {shape}",
                                 shape, build, _call, rng, rtol=1e-8)  # fmt: skip
        bias = c(True, False)
        build = lambda nn: nn.LayerNorm(norm_arg, elementwise_affine=affine, bias=bias)  # noqa: E731
        return _module_trial(f"LayerNorm({norm_arg}, affine={affine}, bias={bias}) {shape}",
                             shape, build, _call, rng, rtol=1e-8)  # fmt: skip
    if kind == "group_norm":
        groups = c(1, 2, 3)
        ch = groups * c(1, 2)
        if rng.random() < 0.05:
            ch += 1  # not divisible: both refuse
        shape = (c(1, 2), ch, *_shape(rng, 0, 2, 1, 4))
        affine = c(True, False)
        build = lambda nn: nn.GroupNorm(groups, ch, eps=1e-3, affine=affine)  # noqa: E731
        return _module_trial(f"GroupNorm({groups}, {ch}, affine={affine}) {shape}", shape, build,
                             _call, rng, rtol=1e-8)  # fmt: skip
    if kind in ("fold", "unfold"):
        k, d, p, s = (c(1, 2), c(1, 2)), c(1, 2), c(0, 1), c(1, 2)
        size = (c(3, 4, 5), c(3, 4))
        cin = c(1, 2)
        args = dict(kernel_size=k, dilation=d, padding=p, stride=s)
        if kind == "unfold":
            shape = (c(1, 2), cin, *size)
            if rng.random() < 0.3:
                shape = shape[1:]  # unbatched
            return _module_trial(f"Unfold({args}) {shape}", shape,
                                 lambda nn: nn.Unfold(**args), _call, rng)  # fmt: skip
        blocks = 1
        for i in range(2):
            blocks *= (size[i] + 2 * p - d * (k[i] - 1) - 1) // s + 1
        shape = (c(1, 2), cin * k[0] * k[1], max(blocks, 1))
        if rng.random() < 0.3:
            shape = shape[1:]
        return _module_trial(f"Fold({size}, {args}) {shape}", shape,
                             lambda nn: nn.Fold(size, **args), _call, rng)  # fmt: skip
    if kind == "unflatten":
        shape = _shape(rng, 1, 3, 1, 5)
        dim = int(rng.integers(-len(shape), len(shape)))
        size = shape[dim]
        div = [v for v in (1, 2, 3, 4) if size % v == 0]
        split = (int(_pick(rng, *div)), -1) if rng.random() < 0.5 else (size,)
        return _module_trial(f"Unflatten({dim}, {split}) {shape}", shape,
                             lambda nn: nn.Unflatten(dim, split), lambda lib, m, x: m(x) * 2,
                             rng)  # fmt: skip
    if kind == "pad":
        mode = c("Zero", "Constant", "Reflection", "Replication", "Circular")
        dims = n if mode != "Zero" else c(1, 2, 3)
        spatial = tuple(int(v) for v in rng.integers(2, 5, size=dims))
        shape = (c(1, 2), c(1, 2), *spatial)
        if rng.random() < 0.3:
            shape = shape[1:]
        lo = -1 if mode in ("Zero", "Constant") else 0
        pads = tuple(int(v) for v in rng.integers(lo, 3, size=2 * dims))
        padding = pads if rng.random() < 0.7 else int(rng.integers(0, 2))
        args = (padding, 0.5) if mode == "Constant" else (padding,)
        name = f"{mode}Pad{dims}d"
        return _module_trial(f"{name}{args} {shape}", shape,
                             lambda nn: getattr(nn, name)(*args), _call, rng)  # fmt: skip
    if kind == "upsample":
        mode = c("nearest", "linear", "bilinear", "bicubic", "trilinear", "nearest-exact")
        dims = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}.get(mode, n)
        shape = (c(1, 2), c(1, 2), *(int(v) for v in rng.integers(1, 4, size=dims)))
        kw = {"mode": mode}
        if rng.random() < 0.5:
            kw["scale_factor"] = c(2, 1.5, 0.7, 3)
        else:
            kw["size"] = tuple(int(v) for v in rng.integers(1, 6, size=dims))
        if mode not in ("nearest", "nearest-exact"):
            kw["align_corners"] = c(True, False)
        return _module_trial(f"Upsample({kw}) {shape}", shape,
                             lambda nn: nn.Upsample(**kw), _call, rng, rtol=1e-8)  # fmt: skip
    if kind == "similarity":
        shape = _shape(rng, 1, 3, 1, 4)
        dim = int(rng.integers(-len(shape), len(shape)))
        ya = rng.uniform(-1, 1, size=shape)
        cos = rng.random() < 0.5
        eps = c(1e-8, 0.5)
        if cos:
            build = lambda nn: nn.CosineSimilarity(dim=dim, eps=eps)  # noqa: E731
        else:
            p, keep = c(1.0, 2.0, 3.0, float("inf")), c(True, False)
            build = lambda nn: nn.PairwiseDistance(p=p, eps=1e-6, keepdim=keep)  # noqa: E731

        def call(lib, m, x):
            return m(x, lib.tensor(ya))

        return _module_trial(f"{'cos' if cos else 'pdist'} dim={dim} {shape}", shape, build,
                             call, rng, rtol=1e-8)  # fmt: skip
    if kind == "softmax2d":
        shape = (c(1, 2), c(1, 3), c(1, 2), c(1, 3))
        if rng.random() < 0.3:
            shape = shape[1:]
        return _module_trial(f"Softmax2d {shape}", shape, lambda nn: nn.Softmax2d(), _call, rng)
    if kind == "lrn":
        size, k = c(1, 2, 3, 5), c(1.0, 2.0)
        shape = (c(1, 2), c(1, 3, 4), *_shape(rng, 0, 2, 1, 3))
        build = lambda nn: nn.LocalResponseNorm(size, alpha=0.3, beta=0.75, k=k)  # noqa: E731
        return _module_trial(f"LocalResponseNorm({size}, k={k}) {shape}", shape, build, _call,
                             rng, rtol=1e-8)  # fmt: skip
    if kind == "channel_shuffle":
        g = c(1, 2, 3)
        shape = (c(1, 2), g * c(1, 2), *_shape(rng, 0, 2, 1, 3))
        return _module_trial(f"ChannelShuffle({g}) {shape}", shape,
                             lambda nn: nn.ChannelShuffle(g), lambda lib, m, x: m(x) * 1.5,
                             rng)  # fmt: skip
    if kind == "activation":
        which = c(("ELU", (0.7,)), ("CELU", (1.3,)), ("SELU", ()), ("GLU", (-1,)),
                  ("Hardshrink", (0.4,)), ("Softshrink", (0.6,)), ("Tanhshrink", ()),
                  ("Mish", ()), ("Hardswish", ()), ("Hardsigmoid", ()), ("Softsign", ()),
                  ("Threshold", (0.2, -3.0)), ("Hardtanh", (-0.5, 0.8)), ("ReLU6", ()),
                  ("Softplus", (2.0, 1.5)), ("LogSigmoid", ()), ("PReLU", (c(1, 2), 0.1)),
                  ("SiLU", ()), ("GELU", (c("none", "tanh"),)), ("Softmin", (-1,)),
                  ("LeakyReLU", (0.3,)))  # fmt: skip
        act, args = which
        shape = (c(1, 2), 2, *_shape(rng, 0, 2, 1, 4))
        if act == "GLU":
            shape = shape[:-1] + (2 * c(1, 2),)
        # (CELU: torch's float64 gradient is exp(x / alpha) to 4e-9 only, retrograd's is
        # exact; compared to 1e-7 there)
        return _module_trial(f"{act}{args} {shape}", shape, lambda nn: getattr(nn, act)(*args),
                             _call, rng, rtol=1e-7 if act == "CELU" else 1e-9)  # fmt: skip
    # weight_norm over a Linear or a Conv1d, at a random dim
    conv = rng.random() < 0.5
    dim = c(0, 1, -1, None)
    if conv:
        shape = (c(1, 2), 2, c(3, 4))
        build_inner = lambda nn: nn.Conv1d(2, c2, 2)  # noqa: E731
        c2 = c(1, 3)
    else:
        shape = (c(1, 2), 3)
        c2 = c(1, 2)
        build_inner = lambda nn: nn.Linear(3, c2)  # noqa: E731
    build = lambda nn: nn.utils.parametrizations.weight_norm(build_inner(nn), dim=dim)  # noqa: E731
    return _module_trial(f"weight_norm({'Conv1d' if conv else 'Linear'}, dim={dim}) {shape}",
                         shape, build, _call, rng, rtol=1e-8)  # fmt: skip


# ---- recurrent layers --------------------------------------------------------------------


@gen("recurrent")
def _recurrent(rng):
    c = lambda *v: _pick(rng, *v)  # noqa: E731
    kind = c("RNN", "GRU", "LSTM", "RNNCell", "GRUCell", "LSTMCell")
    fin, hid = c(1, 2, 3), c(1, 2, 3)
    batch, steps = c(1, 2, 3), c(1, 2, 3)
    bias = c(True, False)
    if kind.endswith("Cell"):
        unbatched = rng.random() < 0.3
        shape = (fin,) if unbatched else (batch, fin)
        given = rng.random() < 0.5
        ha = rng.uniform(-1, 1, size=(hid,) if unbatched else (batch, hid))
        kw = {"nonlinearity": c("tanh", "relu")} if kind == "RNNCell" else {}

        def call(lib, m, x):
            if not given:
                return m(x)
            h = lib.tensor(ha)
            return m(x, (h, h * 0.5) if kind == "LSTMCell" else h)

        return _module_trial(f"{kind}({fin}, {hid}, bias={bias}, {kw}) {shape} h={given}",
                             shape, lambda nn: getattr(nn, kind)(fin, hid, bias=bias, **kw),
                             call, rng, rtol=1e-8)  # fmt: skip
    layers, bidir, batch_first = c(1, 2, 3), c(True, False), c(True, False)
    kw = dict(num_layers=layers, bias=bias, batch_first=batch_first, bidirectional=bidir)
    # (no proj_size drawn: LSTM projections are checked in test_realports9_fixes.py)
    if kind == "RNN":
        kw["nonlinearity"] = c("tanh", "relu")
    unbatched = rng.random() < 0.2
    packed = not unbatched and rng.random() < 0.35
    shape = (
        (steps, fin) if unbatched else ((batch, steps, fin) if batch_first else (steps, batch, fin))
    )
    dirs = 2 if bidir else 1
    out_h = kw.get("proj_size", hid)
    hshape = (layers * dirs,) + (() if unbatched else (batch,))
    ha = rng.uniform(-1, 1, size=(*hshape, out_h))
    ca = rng.uniform(-1, 1, size=(*hshape, hid))
    given = rng.random() < 0.5
    lengths = sorted((int(v) for v in rng.integers(1, steps + 1, size=batch)), reverse=True)
    lengths[0] = steps
    enforce = c(True, False)
    if not enforce:
        lengths = [int(v) for v in rng.permutation(lengths)]

    def call(lib, m, x):
        state = None
        if given:
            state = (lib.tensor(ha), lib.tensor(ca)) if kind == "LSTM" else lib.tensor(ha)
        if packed:
            rnn = lib.nn.utils.rnn
            p = rnn.pack_padded_sequence(
                x, lengths, batch_first=batch_first, enforce_sorted=enforce
            )
            out, h = m(p, state) if given else m(p)
            return rnn.pad_packed_sequence(out, batch_first=batch_first)[0], h
        return m(x, state) if given else m(x)

    return _module_trial(
        f"{kind}({fin}, {hid}, {kw}) {shape} h0={given} packed={packed} lengths={lengths}",
        shape, lambda nn: getattr(nn, kind)(fin, hid, **kw), call, rng, rtol=1e-8,
    )  # fmt: skip


# ---- half precision among the other dtypes ------------------------------------------------

HALF = ("float16", "bfloat16")
PARTNERS = ("float16", "bfloat16", "float32", "float64", "int64", "bool", "float", "int",
            "0d_float64", "0d_int64", "0d_float16", "0d_bfloat16", "0d_bool")  # fmt: skip
HALF_BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "atan2", "where",
               "lt", "eq", "cat", "stack", "clamp", "lerp", "fmod", "remainder", "hypot",
               "add_", "mul_", "copy_", "addcmul", "floor_divide", "xlogy")  # fmt: skip
HALF_UNARY = ("exp", "log", "sqrt", "tanh", "sigmoid", "softmax", "log_softmax", "relu", "gelu",
              "sum", "mean", "prod", "sum_dtype", "mean_dtype", "cumsum", "cumsum_dtype",
              "var", "norm", "amax", "argmax", "sort", "topk", "to_float", "to_half",
              "to_bfloat16", "to_double", "to_long", "layer_norm", "linear", "mse", "ce",
              "abs", "neg", "round", "floor", "reciprocal", "rsqrt", "square", "logsumexp",
              "softmax_dtype", "matmul", "masked_fill", "index_select", "getitem", "setitem",
              "std_mean", "sign", "isnan", "nan_to_num", "erf", "silu", "conv1d", "avg_pool",
              "max_pool", "interpolate", "pad", "embedding", "batch_norm", "group_norm",
              "cumprod", "clamp_scalars", "dropout_eval", "sdpa")  # fmt: skip


def _is_float(lib, t):
    return t.dtype in (lib.float16, lib.bfloat16, lib.float32, lib.float64)


def _half_out(lib, t):
    """A result as (its dtype's name, its values in float64 or as they are)."""
    if not isinstance(t, lib.Tensor):
        return [t]
    name = str(t.dtype).rsplit(".", 1)[-1]
    return [name, t.double() if _is_float(lib, t) and t.dtype != lib.float64 else t]


def _half_operand(rng, kind, shape, positive=False):
    """(kind, array or scalar): a tensor of dtype kind, a 0-d one, or a Python scalar."""
    if kind in ("float", "int"):
        v = float(rng.uniform(0.5, 2.0)) if kind == "float" else int(rng.integers(1, 4))
        return kind, v if positive or rng.random() < 0.5 else -v
    dtype = kind.removeprefix("0d_")
    if kind.startswith("0d_"):
        shape = ()
    if dtype == "bool":
        return dtype, rng.random(shape) < 0.5
    if dtype == "int64":
        lo = 1 if positive else -3
        return dtype, rng.integers(lo, 4, size=shape)
    a = rng.uniform(0.25 if positive else -2.0, 2.0, size=shape)
    return dtype, np.round(a * 8) / 8 + (0.0625 if positive else 0)  # exact in every dtype


@gen("half")
def _half(rng):
    binary = rng.random() < 0.5
    op = str(_pick(rng, *(HALF_BINARY if binary else HALF_UNARY)))
    shape = _shape(rng, 1, 3, 1, 4)
    dt = str(_pick(rng, *HALF))
    positive = op in ("pow", "log", "sqrt", "rsqrt", "fmod", "remainder", "xlogy", "reciprocal")
    first = _half_operand(rng, dt, shape, positive)
    tail = shape[int(rng.integers(len(shape) + 1)) :]
    other = _half_operand(rng, str(_pick(rng, *PARTNERS)), tail, positive)
    w2 = rng.uniform(-1, 1, size=(2, shape[-1]))
    tgt = rng.integers(0, shape[-1], size=shape[:-1])

    def make(lib, spec, grad=True):
        kind, value = spec
        if kind in ("float", "int"):
            return value
        t = lib.tensor(value, dtype=getattr(lib, kind))
        if grad and kind not in ("int64", "bool"):
            t.requires_grad_(True)
        return t

    def body(lib):
        # (floor_divide without gradients: torch has no derivative for it)
        x = make(lib, first, op != "floor_divide")
        y = make(lib, other, op != "floor_divide")
        leaves = [t for t in (x, y) if isinstance(t, lib.Tensor) and t.requires_grad]
        f = lib.nn.functional
        if binary:
            yt = y if isinstance(y, lib.Tensor) else lib.tensor(y)
            out = {
                "add": lambda: x + y,
                "sub": lambda: x - y if not isinstance(y, bool) else x,
                "mul": lambda: x * y,
                "div": lambda: x / y,
                # (not a bool exponent: torch's backward subtracts 1 from it and refuses)
                "pow": lambda: x ** (yt.long() if yt.dtype == lib.bool else y),
                "maximum": lambda: lib.maximum(x, yt),
                "minimum": lambda: lib.minimum(x, yt),
                "atan2": lambda: lib.atan2(x, yt),
                "where": lambda: lib.where(x > 0, x, y),
                "lt": lambda: x < y,
                "eq": lambda: x == y,
                "cat": lambda: lib.cat([x.reshape(-1), yt.reshape(-1)]),
                "stack": lambda: lib.stack([x, yt.expand_as(x)]),
                "clamp": lambda: x.clamp(min=y),
                "lerp": lambda: lib.lerp(x, yt.expand_as(x), 0.25),
                "fmod": lambda: lib.fmod(x, y),
                "remainder": lambda: lib.remainder(x, y),
                "hypot": lambda: lib.hypot(x, yt),
                "add_": lambda: (x * 1).add_(y),
                "mul_": lambda: (x * 1).mul_(y),
                "copy_": lambda: (x * 1).copy_(yt),
                "addcmul": lambda: lib.addcmul(x, x, yt, value=0.5),
                "floor_divide": lambda: lib.floor_divide(x, y),
                "xlogy": lambda: lib.xlogy(x, y),
            }[op]()
            return [out], leaves
        n = shape[-1]
        out = {
            "exp": lambda: x.exp(),
            "log": lambda: x.log(),
            "sqrt": lambda: x.sqrt(),
            "tanh": lambda: x.tanh(),
            "sigmoid": lambda: x.sigmoid(),
            "softmax": lambda: x.softmax(-1),
            "log_softmax": lambda: x.log_softmax(-1),
            "relu": lambda: f.relu(x),
            "gelu": lambda: f.gelu(x),
            "sum": lambda: x.sum(),
            "mean": lambda: x.mean(-1),
            "prod": lambda: x.prod(-1),
            "sum_dtype": lambda: x.sum(-1, dtype=lib.float32),
            "mean_dtype": lambda: x.mean(dtype=lib.float64),
            "cumsum": lambda: x.cumsum(-1),
            "cumsum_dtype": lambda: x.cumsum(0, dtype=lib.float32),
            "var": lambda: x.var(-1) if n > 1 else x.var(),
            "norm": lambda: x.norm(),
            "amax": lambda: x.amax(-1),
            "argmax": lambda: x.argmax(-1),
            "sort": lambda: x.sort(-1).values,
            "topk": lambda: x.topk(1, -1).values,
            "to_float": lambda: x.float(),
            "to_half": lambda: x.half(),
            "to_bfloat16": lambda: x.bfloat16(),
            "to_double": lambda: x.to(lib.float64),
            "to_long": lambda: x.long(),
            "layer_norm": lambda: f.layer_norm(x, (n,)),
            "linear": lambda: f.linear(x, lib.tensor(w2, dtype=x.dtype)),
            "mse": lambda: f.mse_loss(x, x.detach().flip(-1)),
            "ce": lambda: f.cross_entropy(x.reshape(-1, n), lib.tensor(tgt.reshape(-1))),
            "abs": lambda: x.abs(),
            "neg": lambda: -x,
            "round": lambda: x.round(),
            "floor": lambda: x.floor(),
            "reciprocal": lambda: x.reciprocal(),
            "rsqrt": lambda: x.rsqrt(),
            "square": lambda: x.square(),
            "logsumexp": lambda: x.logsumexp(-1),
            "softmax_dtype": lambda: x.softmax(-1, dtype=lib.float32),
            "matmul": lambda: x @ x.transpose(-1, -2) if x.ndim > 1 else x @ x,
            "masked_fill": lambda: x.masked_fill(x > 0.5, -1.0),
            "index_select": lambda: x.index_select(-1, lib.tensor([n - 1, 0])),
            "getitem": lambda: x[..., ::2],
            "setitem": lambda: _half_setitem(x),
            "std_mean": lambda: lib.std_mean(x, -1) if n > 1 else lib.std_mean(x),
            "sign": lambda: x.sign(),
            "isnan": lambda: (x / (x - x)).isnan(),
            "nan_to_num": lambda: (x / (x - x)).nan_to_num(),
            "erf": lambda: x.erf(),
            "silu": lambda: f.silu(x),
            "conv1d": lambda: f.conv1d(
                x.reshape(1, 1, -1), lib.tensor(w2[:1, None], dtype=x.dtype)
            ),
            "avg_pool": lambda: f.avg_pool1d(x.reshape(1, 1, -1), 2, ceil_mode=True),
            "max_pool": lambda: f.max_pool1d(x.reshape(1, 1, -1), 2, ceil_mode=True),
            "interpolate": lambda: f.interpolate(
                x.reshape(1, 1, -1), scale_factor=2, mode="linear"
            ),
            "pad": lambda: f.pad(x, (1, 2), mode="constant", value=0.5),
            "embedding": lambda: f.embedding(lib.tensor(tgt), x.reshape(-1, n)),
            "batch_norm": lambda: f.batch_norm(x.reshape(-1, n), None, None, training=True),
            "group_norm": lambda: f.group_norm(x.reshape(1, -1), 1),
            "cumprod": lambda: x.cumprod(-1),
            "clamp_scalars": lambda: x.clamp(-0.5, 1.0),
            "dropout_eval": lambda: f.dropout(x, 0.5, training=False),
            "sdpa": lambda: f.scaled_dot_product_attention(
                x.reshape(1, -1, n), x.reshape(1, -1, n), x.reshape(1, -1, n)
            ),
        }[op]()
        return [out], leaves

    def fn(lib):
        outs, leaves = body(lib)
        outs = _leaves(outs)
        tensors = [o for o in outs if isinstance(o, lib.Tensor)]
        diff = [o for o in tensors if _is_float(lib, o) and o.requires_grad]
        grads = []
        if diff and leaves:
            total = sum(
                (o.double() * lib.tensor(np.linspace(-1, 1, o.numel()).reshape(tuple(o.shape))))
                .sum() for o in diff
            )  # fmt: skip
            grads = list(lib.autograd.grad(total, leaves, allow_unused=True))
            grads = [lib.zeros_like(x) if g is None else g for g, x in zip(grads, leaves)]
        return [v for o in outs + grads for v in _half_out(lib, o)]

    return Trial(f"{op} {dt}{list(shape)} with {other[0]} {np.shape(other[1])}", fn, rtol=2e-2)


def _half_setitem(x):
    out = x * 1
    out[..., 0] = 0.5
    return out
