# ruff: noqa: W291, W293, E101, E501  (the program is kept as its author wrote it: tabs, trailing blanks)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
bit packing on integer tensors, torch used as an array library.

- mobiusml/hqq's ``hqq/core/bitpack.py`` as written (tab-indented; its ``from .utils import *``
  replaced by the one helper it uses, ``is_divisible``): ``BitPack``'s 8-, 4-, 2-bit packing
  into uint8 by ``W_q.to(torch.uint8)``, ``<<`` and ``|`` of uint8 halves and quarters,
  unpacking by ``&`` with binary literals and ``>>``, through ``torch.cat(..., axis=0)`` or
  writes into ``torch.empty(..., dtype=torch.uint8)`` slices; 3-bit packing of ten rows into
  int32 (``torch.zeros(..., dtype=torch.int32)`` filled by ``W_q[:len(W_q_in)] = W_q_in``,
  shifts up to 27), its unpacking into uint8 (an int32 written into a uint8 tensor); the
  experimental mixed 3-2-bit uint8 and 4-bit int32 packings (``<< 28`` overflows into the
  sign bit; ``W_q & 0b1111 << 28``, a Python int past int32's range, and ``>> 28`` of a
  negative int32, an arithmetic shift).
- the harness's min-max affine quantization (the start of hqq's ``Quantizer.quantize``:
  ``W.min(axis=1, keepdim=True)[0]``, ``(max_v/(_max - _min)).clamp(max=2e4)``,
  ``torch.round(...).clamp(min_v, max_v)``) giving the codes packed, and the dequantized
  weights of the unpacked codes.

The lines changed: the ``import`` line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import port, run_source

BITPACK_SOURCE = """
import torch
import numpy as np 


def is_divisible(val1, val2):
	return int(val2*np.ceil(val1/val2))==val1


#Bit packing logic. format: pack/unpack_nBits_target-<uint8 or int32>
class BitPack:
	
	#8-bit 
	################################################
	@staticmethod
	def pack_8bit_u8(W_q):
		return W_q.to(torch.uint8)

	@staticmethod
	def unpack_8bit_u8(W_q):
		return W_q

	#4-bit 
	################################################
	@staticmethod
	def pack_4bit_u8(W_q): #uint8 > uint8/2
		W_q = W_q.to(torch.uint8)
		_step = int(len(W_q)/2)
		return (W_q[:_step] << 4) | W_q[_step:]	

	@staticmethod
	def unpack_4bit_u8_cat(W_q): #uint8/2 > uint8
		return torch.cat([(W_q & 0b11110000) >> 4, W_q & 0b00001111], axis=0)

	#A bit faster than the _cat version
	@staticmethod
	def unpack_4bit_u8(W_q): #uint8/2 > uint8
		_step       = W_q.shape[0]
		tmp         = torch.empty([2*_step, W_q.shape[1]], dtype=torch.uint8, device=W_q.device)
		tmp[:_step] = (W_q & 0b11110000) >> 4
		tmp[_step:] = (W_q & 0b00001111)
		return tmp

	#2-bit
	################################################
	@staticmethod
	def pack_2bit_u8(W_q): #uint8 > uint8/4
		W_q = W_q.to(torch.uint8)
		_step = int(len(W_q)/4)
		return (W_q[:_step] << 6 | W_q[_step:2*_step] << 4 |  W_q[2*_step:3*_step] << 2 | W_q[3*_step:])

	@staticmethod
	def unpack_2bit_u8_cat(W_q):
		return torch.cat([(W_q & 0b11000000) >> 6, (W_q & 0b00110000) >> 4, (W_q & 0b00001100) >> 2, W_q & 0b00000011], axis=0)

	#A bit faster than the _cat version
	@staticmethod
	def unpack_2bit_u8(W_q):
		_step                = W_q.shape[0]
		tmp                  = torch.empty([4*_step, W_q.shape[1]], dtype=torch.uint8, device=W_q.device)
		tmp[:_step]          = (W_q & 0b11000000) >> 6
		tmp[_step:2*_step]   = (W_q & 0b00110000) >> 4
		tmp[2*_step:3*_step] = (W_q & 0b00001100) >> 2
		tmp[3*_step:]        = (W_q & 0b00000011)
		return tmp

	#3bit
	################################################
	@staticmethod
	def pack_3bit_32(W_q_in):
		W_q = torch.zeros([int(10*np.ceil(W_q_in.shape[0]/10.)), W_q_in.shape[1]], device=W_q_in.device, dtype=torch.int32)
		W_q[:len(W_q_in)] = W_q_in
		_step = int(len(W_q)/10)
		W_q = (W_q[:_step] << 27) | (W_q[_step:_step*2] << 24) | (W_q[_step*2:_step*3] << 21) | (W_q[_step*3:_step*4] << 18) | (W_q[_step*4:_step*5] << 15) | (W_q[_step*5:_step*6] << 12) | (W_q[_step*6:_step*7] << 9) | (W_q[7*_step:_step*8] << 6) | (W_q[_step*8:_step*9] << 3) | (W_q[_step*9:]) 
		return W_q

	@staticmethod
	def unpack_3bit_32_cat(W_q):
		return torch.cat([((W_q & 0b00111000000000000000000000000000) >> 27),
						  ((W_q & 0b00000111000000000000000000000000) >> 24),
						  ((W_q & 0b00000000111000000000000000000000) >> 21),
						  ((W_q & 0b00000000000111000000000000000000) >> 18),
						  ((W_q & 0b00000000000000111000000000000000) >> 15),
						  ((W_q & 0b00000000000000000111000000000000) >> 12),
						  ((W_q & 0b00000000000000000000111000000000) >> 9),
						  ((W_q & 0b00000000000000000000000111000000) >> 6),
						  ((W_q & 0b00000000000000000000000000111000) >> 3),
						  ((W_q & 0b00000000000000000000000000000111))], axis=0)


	#A bit faster than _cat version
	@staticmethod
	def unpack_3bit_32(W_q):
		_step                = W_q.shape[0]
		tmp                  = torch.empty([10*_step, W_q.shape[1]], dtype=torch.uint8, device=W_q.device)
		tmp[:_step]          = ((W_q & 0b00111000000000000000000000000000) >> 27)
		tmp[1*_step:2*_step] = ((W_q & 0b00000111000000000000000000000000) >> 24)
		tmp[2*_step:3*_step] = ((W_q & 0b00000000111000000000000000000000) >> 21)
		tmp[3*_step:4*_step] = ((W_q & 0b00000000000111000000000000000000) >> 18)
		tmp[4*_step:5*_step] = ((W_q & 0b00000000000000111000000000000000) >> 15)
		tmp[5*_step:6*_step] = ((W_q & 0b00000000000000000111000000000000) >> 12)
		tmp[6*_step:7*_step] = ((W_q & 0b00000000000000000000111000000000) >> 9)
		tmp[7*_step:8*_step] = ((W_q & 0b00000000000000000000000111000000) >> 6)
		tmp[8*_step:9*_step] = ((W_q & 0b00000000000000000000000000111000) >> 3)
		tmp[9*_step:]        = ((W_q & 0b00000000000000000000000000000111))
		return tmp


	#Experimental 
	################################################################################################################
	@staticmethod
	def pack_3bit2bit_u8(W_q):
		assert is_divisible(len(W_q),3), "Input should have shape[0] divisble by 3 to use mixed 3-2bit bit packing"
		_step = int(len(W_q)/3)
		return (W_q[:_step] << 6 | W_q[1*_step:2*_step] << 3 | W_q[2*_step:] )

	@staticmethod
	def unpack_3bit2bit_u8(W_q):
		return torch.cat([(W_q & 0b11100000) >> 6, (W_q & 0b00011100) >> 3, W_q & 0b00000011], axis=0)

	@staticmethod
	def pack_4bit_32(W_q):
		W_q = W_q.to(torch.int32)
		_step = int(len(W_q)/8)
		W_q = (W_q[:_step] << 28) | (W_q[_step:_step*2] << 24) | (W_q[_step*2:_step*3] << 20) | (W_q[_step*3:_step*4] << 16) | (W_q[_step*4:_step*5] << 12) | (W_q[_step*5:_step*6] << 8) | (W_q[_step*6:_step*7] << 4) | (W_q[_step*7:])
		return W_q

	@staticmethod
	def unpack_4bit_32(W_q):
		return torch.cat([((W_q & 0b11110000000000000000000000000000) >> 28),
						  ((W_q & 0b00001111000000000000000000000000) >> 24),
						  ((W_q & 0b00000000111100000000000000000000) >> 20),
						  ((W_q & 0b00000000000011110000000000000000) >> 16),
						  ((W_q & 0b00000000000000001111000000000000) >> 12),
						  ((W_q & 0b00000000000000000000111100000000) >> 8),
						  ((W_q & 0b00000000000000000000000011110000) >> 4),
						  ((W_q & 0b00000000000000000000000000001111))], axis=0)

"""

QUANTIZE_SOURCE = """
import torch


def quantize(W, nbits, group_size):
	# the min-max affine quantization hqq's Quantizer.quantize starts from (its optimizer left out)
	W     = W.float().reshape([-1, group_size])
	_min  = W.min(axis=1, keepdim=True)[0]
	_max  = W.max(axis=1, keepdim=True)[0]
	max_v = 2**nbits - 1
	min_v = 0
	scale = (max_v/(_max - _min)).clamp(max=2e4)
	zero  = -_min*scale
	W_q   = torch.round(W*scale + zero).clamp(min_v, max_v)
	return W_q, 1./scale, zero


def dequantize(W_q, scale, zero, shape):
	return ((W_q.float() - zero)*scale).reshape(shape)
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
    with pytest.raises(AssertionError, match="divisble by 3"):
        ns["BitPack"].pack_3bit2bit_u8(rg.tensor(codes[:8]))
