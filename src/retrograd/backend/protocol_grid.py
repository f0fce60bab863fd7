"""torch's ``grid_sample`` composed of backend primitives: the forward (the arithmetic of
``nn.functional.grid`` 's composite, bit for bit) and its backward, the gradients of the input
and of the grid computed together from the input and the grid alone (torch's
``grid_sampler_2d_backward`` reads those two): the corner weights, indices and values are
recomputed there, never held between forward and backward.

Coordinates are ``[N, *out]`` arrays, one per spatial dimension, ``x`` first (the grid's last
axis); ``sizes`` are the input's spatial sizes, outermost first.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

_A = -0.75  # the cubic convolution's A (torch's get_cubic_upsample_coefficients)


def _coordinate(b, grid, k):
    """``grid[..., k]``."""
    shape = b.shape(grid)
    slices = tuple(slice(0, n, 1) for n in shape[:-1]) + (slice(k, k + 1, 1),)
    return b.reshape(b.slice(grid, slices), shape[:-1])


def _unnormalized(b, c, size, align):
    """torch's grid_sampler_unnormalize, in its order of operations."""
    if align:
        return b.mul_scalar(b.div_scalar(b.add_scalar(c, 1.0), 2.0), float(size - 1))
    return b.div_scalar(b.sub_scalar(b.mul_scalar(b.add_scalar(c, 1.0), float(size)), 1.0), 2.0)


def _unnormalized_slope(b, g, size, align):
    """``g`` times the slope of :func:`_unnormalized`."""
    if align:
        return b.div_scalar(b.mul_scalar(g, float(size - 1)), 2.0)
    return b.mul_scalar(b.div_scalar(g, 2.0), float(size))


def _clip(b, c, limit):
    """``c`` clipped to [0, limit] (a NaN to 0), and where it was strictly inside."""
    inside = b.logical_and(b.greater_elem(c, 0.0), b.lower_elem(c, float(limit)))
    clipped = b.clamp(c, 0.0, float(limit))
    clipped = b.mask_fill(clipped, b.is_nan(clipped), 0.0)
    return b.mask_where(clipped, inside, c), inside


def _reflect(b, c, twice_low, twice_high):
    """torch's reflect_coordinates, and what its slope needs (``...`` for a zero slope)."""
    if twice_low == twice_high:
        return b.mul_scalar(c, 0.0), ...
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    shifted = b.sub_scalar(c, low)
    distance = b.abs(shifted)
    extra = b.remainder_scalar(distance, span)
    flips = b.floor(b.div_scalar(distance, span))
    even = b.equal_elem(b.remainder_scalar(flips, 2.0), 0.0)
    out = b.mask_where(
        b.add_scalar(b.mul_scalar(extra, -1.0), span + low), even, b.add_scalar(extra, low)
    )
    slope = b.mask_fill(b.sign(shifted), b.is_nan(shifted), 0.0)
    return out, (slope, even)


def _padded(b, pixels, size, padding_mode, align):
    """Pixel coordinates moved by ``padding_mode`` (torch's compute_coordinates), and what
    its slope needs."""
    if padding_mode == "border":
        out, inside = _clip(b, pixels, size - 1)
        return out, (inside, None)
    if padding_mode == "reflection":
        if align:
            reflected, sign = _reflect(b, pixels, 0, 2 * (size - 1))
        else:
            reflected, sign = _reflect(b, pixels, -1, 2 * size - 1)
        out, inside = _clip(b, reflected, size - 1)
        return out, (inside, sign)
    return pixels, None


def _padded_slope(b, g, how):
    """``g`` times the slope of :func:`_padded` (zero where a coordinate was clipped)."""
    if how is None:
        return g
    inside, sign = how
    g = b.mask_fill(g, b.logical_not(inside), 0.0)
    if sign is None:
        return g
    if sign is ...:
        return b.mul_scalar(g, 0.0)
    slope, even = sign
    g = b.mask_where(b.neg(g), even, g)
    return b.mul(g, slope)


def _where(b, flat, points, sizes):
    """The flat indices ``[N, C, count]`` of the integer-valued ``points`` (outermost first)
    and where they are inside the image (``[N, *out]``, bool)."""
    n, c = b.shape(flat)[:2]
    inside = index = None
    for coords, size in zip(points, sizes):
        within = b.logical_and(
            b.greater_equal_elem(coords, 0.0), b.lower_equal_elem(coords, float(size - 1))
        )
        inside = within if inside is None else b.logical_and(inside, within)
        # (a NaN point reads zero, not an index); combined in int64: in the coordinates'
        # dtype a bfloat16 volume's flat index rounded past its end (632 of 630 voxels)
        clamped = b.cast(b.mask_fill(coords, b.logical_not(within), 0.0), "int64")
        index = clamped if index is None else b.add(b.mul_scalar(index, size), clamped)
    shape = b.shape(points[0])
    count = math.prod(shape[1:])
    where = b.expand(b.reshape(index, (n, 1, count)), (n, c, count))
    return where, inside


def _read(b, flat, where, inside):
    """``flat`` at ``where``, zero outside: ``[N, C, *out]``."""
    n, c = b.shape(flat)[:2]
    out = b.shape(inside)[1:]
    values = b.reshape(b.gather(flat, where, 2), (n, c) + out)
    return b.mul(values, b.cast(b.reshape(inside, (n, 1) + out), b.dtype(flat)))


def _channel(b, w):
    """``w`` ``[N, *out]`` as ``[N, 1, *out]``."""
    shape = b.shape(w)
    return b.reshape(w, shape[:1] + (1,) + shape[1:])


def _near(b, x):  # cubic_convolution1, |x| <= 1
    return b.add_scalar(b.mul(b.mul(b.sub_scalar(b.mul_scalar(x, _A + 2), _A + 3), x), x), 1.0)


def _far(b, x):  # cubic_convolution2, 1 < |x| < 2
    inner = b.add_scalar(b.mul(b.sub_scalar(b.mul_scalar(x, _A), 5 * _A), x), 8 * _A)
    return b.sub_scalar(b.mul(inner, x), 4 * _A)


def _near_slope(b, x):  # (3 (A + 2) x - 2 (A + 3)) x
    return b.mul(b.sub_scalar(b.mul_scalar(x, 3 * (_A + 2)), 2 * (_A + 3)), x)


def _far_slope(b, x):  # (3 A x - 10 A) x + 8 A
    return b.add_scalar(b.mul(b.sub_scalar(b.mul_scalar(x, 3 * _A), 10 * _A), x), 8 * _A)


def _cubic(b, t):
    """The weights of the taps at -1, 0, 1, 2 around a point ``t`` past the tap at 0."""
    rest = b.rsub_scalar(t, 1.0)
    return [
        _far(b, b.add_scalar(t, 1.0)),
        _near(b, t),
        _near(b, rest),
        _far(b, b.add_scalar(rest, 1.0)),
    ]


def _cubic_slopes(b, t):
    """The derivatives of :func:`_cubic`'s weights in ``t``."""
    rest = b.rsub_scalar(t, 1.0)
    return [
        _far_slope(b, b.add_scalar(t, 1.0)),
        _near_slope(b, t),
        b.neg(_near_slope(b, rest)),
        b.neg(_far_slope(b, b.add_scalar(rest, 1.0))),
    ]


def _taps(b, flat, grid, sizes, mode, padding_mode, align):
    """The taps of every output point: a list of ``(where, inside, weight factors)``, the
    factors one per spatial dimension (x first; ``None`` for ``nearest``), and the slope
    information of the coordinates."""
    spatial = len(sizes)
    coords = [_coordinate(b, grid, k) for k in range(spatial)]
    if mode == "bicubic":
        width, height = sizes[1], sizes[0]
        x = _unnormalized(b, coords[0], width, align)
        y = _unnormalized(b, coords[1], height, align)
        x0, y0 = b.floor(x), b.floor(y)
        tx, ty = b.sub(x, x0), b.sub(y, y0)

        def tap(c, k, size):
            moved, _ = _padded(b, b.add_scalar(c, float(k - 1)), size, padding_mode, align)
            return b.trunc(moved)

        xs = [tap(x0, i, width) for i in range(4)]
        taps = []
        for j in range(4):
            ys = tap(y0, j, height)
            for i in range(4):
                where, inside = _where(b, flat, (ys, xs[i]), sizes)
                taps.append((where, inside, (i, j)))
        return taps, (tx, ty)
    points, hows = [], []
    for k, size in enumerate(reversed(sizes)):
        point, how = _padded(b, _unnormalized(b, coords[k], size, align), size, padding_mode, align)
        points.append(point)
        hows.append(how)
    if mode == "nearest":
        where, inside = _where(b, flat, [b.round(p) for p in reversed(points)], sizes)
        return [(where, inside, None)], None
    lows = [b.floor(p) for p in points]
    taps = []
    # the corners with x varying fastest, each weight a product over x, y[, z] (torch's order)
    for corner in itertools.product((0, 1), repeat=spatial):
        offsets = corner[::-1]  # per (x, y, z)
        factors, at = [], []
        for point, low, offset in zip(points, lows, offsets):
            factors.append(
                b.sub(b.add_scalar(low, 1.0), point) if offset == 0 else b.sub(point, low)
            )
            at.append(b.add_scalar(low, float(offset)))
        where, inside = _where(b, flat, at[::-1], sizes)
        taps.append((where, inside, (offsets, factors)))
    return taps, hows


def _product(b, factors):
    weight = None
    for factor in factors:
        weight = factor if weight is None else b.mul(weight, factor)
    return weight


def grid_sample(b, x: Any, grid: Any, mode: str, padding_mode: str, align: bool) -> Any:
    """``x`` ``[N, C, *sizes]`` read at the points of ``grid`` ``[N, *out, S]``."""
    n, c, *sizes = b.shape(x)
    flat = b.reshape(x, (n, c, math.prod(sizes)))
    taps, extra = _taps(b, flat, grid, sizes, mode, padding_mode, align)
    if mode == "nearest":
        ((where, inside, _),) = taps
        return _read(b, flat, where, inside)
    if mode == "bicubic":
        wx, wy = _cubic(b, extra[0]), _cubic(b, extra[1])
        out = row = None
        for where, inside, (i, j) in taps:
            term = b.mul(_read(b, flat, where, inside), _channel(b, wx[i]))
            row = term if i == 0 else b.add(row, term)
            if i == 3:
                term = b.mul(row, _channel(b, wy[j]))
                out = term if out is None else b.add(out, term)
        return out
    out = None
    for where, inside, (_, factors) in taps:
        term = b.mul(_read(b, flat, where, inside), _channel(b, _product(b, factors)))
        out = term if out is None else b.add(out, term)
    return out


def grid_sample_backward(
    b, g: Any, x: Any, grid: Any, mode: str, padding_mode: str, align: bool, needs
) -> tuple[Any, Any]:
    """The gradients of :func:`grid_sample` in ``x`` and in ``grid`` (each ``None`` unless
    ``needs`` says), from ``x`` and ``grid``: ``x``'s is the incoming gradient times each
    tap's weight added at its pixel, the grid's the weights' slopes times the values read
    (zero where a coordinate was clipped, and for ``nearest``)."""
    shape = b.shape(x)
    n, c, *sizes = shape
    flat = b.reshape(x, (n, c, math.prod(sizes)))
    flat_shape = b.shape(flat)
    taps, extra = _taps(b, flat, grid, sizes, mode, padding_mode, align)
    g_x = None

    def add_in(g_x, g_values, where):
        g_values = b.reshape(g_values, (n, c) + (math.prod(b.shape(g_values)[2:]),))
        part = b.gather_backward(g_values, where, 2, flat_shape)
        return [part] if g_x is None else g_x + [part]

    g_grid = None
    if mode == "nearest":
        ((where, inside, _),) = taps
        if needs[0]:
            inside_f = b.cast(_channel(b, inside), b.dtype(g))
            g_x = add_in(None, b.mul(g, inside_f), where)
        if needs[1]:
            g_grid = b.zeros_like(grid)
    elif mode == "bicubic":
        tx, ty = extra
        wx, wy = _cubic(b, tx), _cubic(b, ty)
        g_wx = [None] * 4
        g_ty = None
        slopes_y = _cubic_slopes(b, ty) if needs[1] else None
        row = None
        for where, inside, (i, j) in taps:
            g_row = b.mul(g, _channel(b, wy[j]))
            inside_f = b.cast(_channel(b, inside), b.dtype(g))
            if needs[0]:
                g_x = add_in(g_x, b.mul(b.mul(g_row, _channel(b, wx[i])), inside_f), where)
            if needs[1]:
                value = _read(b, flat, where, inside)
                part = b.sum_dim(b.mul(g_row, value), (1,))
                g_wx[i] = part if g_wx[i] is None else b.add(g_wx[i], part)
                term = b.mul(value, _channel(b, wx[i]))
                row = term if i == 0 else b.add(row, term)
                if i == 3:
                    part = b.mul(b.sum_dim(b.mul(g, row), (1,)), _channel(b, slopes_y[j]))
                    g_ty = part if g_ty is None else b.add(g_ty, part)
        if needs[1]:
            slopes = _cubic_slopes(b, tx)
            g_tx = None
            for i in range(4):
                part = b.mul(b.reshape(g_wx[i], b.shape(tx)), slopes[i])
                g_tx = part if g_tx is None else b.add(g_tx, part)
            g_ty = b.reshape(g_ty, b.shape(ty))
            columns = [
                _unnormalized_slope(b, g_tx, sizes[1], align),
                _unnormalized_slope(b, g_ty, sizes[0], align),
            ]
            g_grid = _stacked(b, columns)
    else:
        hows = extra
        spatial = len(sizes)
        g_points = [[] for _ in range(spatial)]
        for where, inside, (offsets, factors) in taps:
            weight = _product(b, factors)
            if needs[0]:
                inside_f = b.cast(_channel(b, inside), b.dtype(g))
                g_x = add_in(g_x, b.mul(b.mul(g, _channel(b, weight)), inside_f), where)
            if needs[1]:
                value = _read(b, flat, where, inside)
                g_weight = b.sum_dim(b.mul(g, value), (1,))
                g_weight = b.reshape(g_weight, b.shape(weight))
                # back through the product (f_x * f_y) * f_z, as the engine takes it
                prefixes = [factors[0]]
                for factor in factors[1:-1]:
                    prefixes.append(b.mul(prefixes[-1], factor))
                g_prefix = g_weight
                for k in range(spatial - 1, -1, -1):
                    if k:
                        part = b.mul(g_prefix, prefixes[k - 1])
                        g_prefix = b.mul(g_prefix, factors[k])
                    else:
                        part = g_prefix
                    if offsets[k] == 0:
                        part = b.neg(part)
                    g_points[k].append(part)
        if needs[1]:
            columns = [
                _unnormalized_slope(
                    b, _padded_slope(b, _total(b, g_points[k]), hows[k]), size, align
                )
                for k, size in enumerate(reversed(sizes))
            ]
            g_grid = _stacked(b, columns)
    if g_x is not None:
        g_x = b.reshape(_total(b, g_x), shape)
    return g_x, g_grid


def _total(b, parts):
    """The sum of the taps' gradients, the last tap's first (the order in which the engine
    summed the composite's, so the gradients are its bits)."""
    total = None
    for part in reversed(parts):
        total = part if total is None else b.add(total, part)
    return total


def _stacked(b, columns):
    """The per-dimension gradients ``[N, *out]`` as ``[N, *out, S]``."""
    shape = b.shape(columns[0])
    return b.cat([b.reshape(col, shape + (1,)) for col in columns], len(shape))
