"""Real ports, continued (the harness: ``tests/real_ports.py``): bit packing on integer
tensors written here in the style of mobiusml/hqq's ``bitpack.py`` and the min-max affine
quantizer its packings serve, torch used as an array library.

Surface: 8-, 4- and 2-bit packing into uint8 (``codes.to(torch.uint8)``, ``<<`` and ``|`` of
uint8 row blocks), unpacking by ``&`` with binary literals and ``>>``, through
``torch.cat(..., axis=0)`` or writes into ``torch.empty(..., dtype=torch.uint8)`` slices;
3-bit packing of ten row blocks into int32 (``torch.zeros(..., dtype=torch.int32)`` filled by
``padded[: len(codes)] = codes``, shifts up to 27) and its unpacking into uint8 (int32 values
written into a uint8 tensor); a mixed 3-3-2-bit uint8 packing; 4-bit packing of eight blocks
into int32 where ``<< 28`` overflows into the sign bit, unpacked by ``packed & 0b1111 << 28``
(a Python int past int32's range) and ``>> 28`` of a negative int32 (an arithmetic shift);
the quantizer's ``groups.min(axis=1, keepdim=True)[0]``, ``(top / (hi - lo)).clamp(max=2e4)``,
``torch.round(...).clamp(0, top)`` and the dequantized weights of the unpacked codes.

Regressions guarded: each of those integer forms once failed or disagreed with torch (shifts
and bitwise ops of uint8 with Python ints, int32 overflow on ``<<``, ``&`` with an int past
the dtype's range, arithmetic ``>>``, cross-dtype slice writes, ``torch.cat`` with ``axis=``,
``min``/``max`` with ``axis=``); an ``assert`` of the program passes through a port unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import port, run_source

BITPACK_SOURCE = """
import torch


def blocks(codes, count):
    assert codes.shape[0] % count == 0, f"rows must be divisible by {count}"
    step = codes.shape[0] // count
    return [codes[i * step : (i + 1) * step] for i in range(count)], step


class BitPack:
    @staticmethod
    def pack_8bit_u8(codes):
        return codes.to(torch.uint8)

    @staticmethod
    def unpack_8bit_u8(packed):
        return packed

    @staticmethod
    def pack_4bit_u8(codes):
        (high, low), _ = blocks(codes.to(torch.uint8), 2)
        return (high << 4) | low

    @staticmethod
    def unpack_4bit_u8(packed):
        rows = packed.shape[0]
        out = torch.empty([2 * rows, packed.shape[1]], dtype=torch.uint8)
        out[:rows] = (packed & 0b11110000) >> 4
        out[rows:] = packed & 0b00001111
        return out

    @staticmethod
    def unpack_4bit_u8_cat(packed):
        return torch.cat([(packed & 0b11110000) >> 4, packed & 0b00001111], axis=0)

    @staticmethod
    def pack_2bit_u8(codes):
        parts, _ = blocks(codes.to(torch.uint8), 4)
        packed = parts[0] << 6
        for shift, part in zip((4, 2, 0), parts[1:]):
            packed = packed | (part << shift)
        return packed

    @staticmethod
    def unpack_2bit_u8(packed):
        rows = packed.shape[0]
        out = torch.empty([4 * rows, packed.shape[1]], dtype=torch.uint8)
        out[:rows] = (packed & 0b11000000) >> 6
        out[rows : 2 * rows] = (packed & 0b00110000) >> 4
        out[2 * rows : 3 * rows] = (packed & 0b00001100) >> 2
        out[3 * rows :] = packed & 0b00000011
        return out

    @staticmethod
    def unpack_2bit_u8_cat(packed):
        masks = ((0b11000000, 6), (0b00110000, 4), (0b00001100, 2), (0b00000011, 0))
        return torch.cat([(packed & mask) >> shift for mask, shift in masks], axis=0)

    @staticmethod
    def pack_3bit_32(codes):
        # ten 3-bit codes per int32; rows are padded with zeros to a multiple of ten
        rows = -(-codes.shape[0] // 10) * 10
        padded = torch.zeros([rows, codes.shape[1]], dtype=torch.int32)
        padded[: len(codes)] = codes
        parts, _ = blocks(padded, 10)
        packed = parts[0] << 27
        for i, part in enumerate(parts[1:]):
            packed |= part << (24 - 3 * i)
        return packed

    @staticmethod
    def unpack_3bit_32(packed):
        rows = packed.shape[0]
        out = torch.empty([10 * rows, packed.shape[1]], dtype=torch.uint8)
        for i in range(10):
            shift = 27 - 3 * i
            out[i * rows : (i + 1) * rows] = (packed & (0b111 << shift)) >> shift
        return out

    @staticmethod
    def unpack_3bit_32_cat(packed):
        shifts = range(27, -1, -3)
        return torch.cat([(packed >> s) & 0b111 for s in shifts], axis=0).to(torch.uint8)

    @staticmethod
    def pack_4bit_32(codes):
        parts, _ = blocks(codes.to(torch.int32), 8)
        packed = parts[0] << 28  # codes of 8 and up land in the sign bit
        for i, part in enumerate(parts[1:]):
            packed = packed | (part << (24 - 4 * i))
        return packed

    @staticmethod
    def unpack_4bit_32(packed):
        # no parentheses needed: << binds tighter than &, giving a Python int past int32
        top = (packed & 0b1111 << 28) >> 28
        rest = [(packed >> (24 - 4 * i)) & 0b1111 for i in range(7)]
        return torch.cat([top] + rest, axis=0)

    @staticmethod
    def pack_3bit2bit_u8(codes):
        (first, second, third), _ = blocks(codes.to(torch.uint8), 3)
        return (first << 5) | (second << 2) | third

    @staticmethod
    def unpack_3bit2bit_u8(packed):
        return torch.cat([packed >> 5, (packed >> 2) & 0b111, packed & 0b11], axis=0)
"""

QUANTIZE_SOURCE = """
import torch


def quantize(weight, bits, group):
    groups = weight.float().reshape([-1, group])
    lo = groups.min(axis=1, keepdim=True)[0]
    hi = groups.max(axis=1, keepdim=True)[0]
    top = 2**bits - 1
    scale = (top / (hi - lo)).clamp(max=2e4)  # a constant group would divide by zero
    zero = -lo * scale
    return torch.round(groups * scale + zero).clamp(0, top), 1.0 / scale, zero


def dequantize(codes, step, zero, shape):
    return ((codes.float() - zero) * step).reshape(shape)
"""

STEPS = [("import torch\n", "import retrograd as torch\n")]

ROUND_TRIPS = [
    (8, "pack_8bit_u8", ["unpack_8bit_u8"]),
    (4, "pack_4bit_u8", ["unpack_4bit_u8", "unpack_4bit_u8_cat"]),
    (2, "pack_2bit_u8", ["unpack_2bit_u8", "unpack_2bit_u8_cat"]),
    (3, "pack_3bit_32", ["unpack_3bit_32", "unpack_3bit_32_cat"]),
    (4, "pack_4bit_32", ["unpack_4bit_32"]),
]


def _run(lib, weights, nbits, pack, unpacks, group_size):
    ns = run_source(BITPACK_SOURCE if lib is torch else port(BITPACK_SOURCE, STEPS), lib)
    qs = run_source(QUANTIZE_SOURCE if lib is torch else port(QUANTIZE_SOURCE, STEPS), lib)
    bitpack = ns["BitPack"]
    weight = lib.tensor(weights)
    codes, scale, zero = qs["quantize"](weight, nbits, group_size)
    packed = getattr(bitpack, pack)(codes)
    out = [codes.numpy(), packed.numpy(), str(packed.dtype).split(".")[-1]]
    for unpack in unpacks:
        unpacked = getattr(bitpack, unpack)(packed)
        unpacked_codes = unpacked[: len(codes)]
        out += [unpacked.numpy(), str(unpacked.dtype).split(".")[-1]]
        out.append(qs["dequantize"](unpacked_codes, scale, zero, weight.shape).numpy())
    return out


@pytest.mark.parametrize("nbits, pack, unpacks", ROUND_TRIPS, ids=[r[1] for r in ROUND_TRIPS])
def test_hqq_bit_packing_round_trips_as_torch(nbits, pack, unpacks):
    rng = np.random.default_rng(3140 + nbits)
    group_size = 16
    # 40 groups of 16: a row count each packing divides
    weights = rng.standard_normal((40, 16)).astype(np.float32)
    theirs = _run(torch, weights, nbits, pack, unpacks, group_size)
    ours = _run(rg, weights, nbits, pack, unpacks, group_size)
    assert len(ours) == len(theirs)
    for i, (mine, reference) in enumerate(zip(ours, theirs)):
        if isinstance(reference, str):
            assert mine == reference, i
        elif reference.dtype.kind == "f":
            assert mine.dtype == reference.dtype, i
            np.testing.assert_allclose(mine, reference, rtol=1e-6, atol=1e-6, err_msg=str(i))
        else:
            assert mine.dtype == reference.dtype and mine.shape == reference.shape, i
            np.testing.assert_array_equal(mine, reference, err_msg=str(i))


def test_hqq_mixed_3_2_bit_packing_as_torch():
    codes = np.random.default_rng(3149).integers(0, 4, (9, 5), dtype=np.uint8)
    results = []
    for lib in (torch, rg):
        ns = run_source(BITPACK_SOURCE if lib is torch else port(BITPACK_SOURCE, STEPS), lib)
        packed = ns["BitPack"].pack_3bit2bit_u8(lib.tensor(codes))
        unpacked = ns["BitPack"].unpack_3bit2bit_u8(packed)
        results.append((packed.numpy(), unpacked.numpy()))
    for mine, reference in zip(results[1], results[0], strict=True):
        assert mine.dtype == reference.dtype
        np.testing.assert_array_equal(mine, reference)
    ns = run_source(port(BITPACK_SOURCE, STEPS), rg)
    with pytest.raises(AssertionError, match="divisible by 3"):
        ns["BitPack"].pack_3bit2bit_u8(rg.tensor(codes[:8]))
