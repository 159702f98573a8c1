"""The first word of numpy's `SeedSequence(entropy).generate_state(1)`, in plain Python.

A plan's step seeds (`shapes.steps.derive_seed`) are that word. The `llmload run` launcher builds the
plan to check it before Locust starts, and needs nothing else of numpy: importing it there cost ~0.08 s
of CPU per run. This is numpy's algorithm (`numpy/random/bit_generator.pyx`: `SeedSequence`, Melissa
O'Neill's `seed_seq` hash, pool of four 32-bit words, no spawn key), word for word; the tests compare it
with numpy's over many inputs.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["first_state_word"]

_MASK32 = 0xFFFFFFFF
_POOL_SIZE = 4
_INIT_A = 0x43B0D7E5
_MULT_A = 0x931E8875
_INIT_B = 0x8B51F9DD
_MULT_B = 0x58F38DED
_MIX_MULT_L = 0xCA01F9DD
_MIX_MULT_R = 0x4973F715
_XSHIFT = 16


def _words(n: int) -> list[int]:
    """`n` as numpy's `SeedSequence` reads an entropy integer: its 32-bit words, least significant first."""
    if n < 0:
        raise ValueError("expected non-negative integer")
    words = [n & _MASK32]
    n >>= 32
    while n:
        words.append(n & _MASK32)
        n >>= 32
    return words


def _mix(x: int, y: int) -> int:
    result = (_MIX_MULT_L * x - _MIX_MULT_R * y) & _MASK32
    return result ^ (result >> _XSHIFT)


def first_state_word(entropy: Iterable[int]) -> int:
    """`int(numpy.random.SeedSequence(list(entropy)).generate_state(1)[0])` for non-negative integers
    (ValueError for a negative one, as numpy)."""
    words = [w for n in entropy for w in _words(int(n))]
    hash_const = _INIT_A

    def hashmix(value: int) -> int:
        nonlocal hash_const
        value ^= hash_const
        hash_const = (hash_const * _MULT_A) & _MASK32
        value = (value * hash_const) & _MASK32
        return value ^ (value >> _XSHIFT)

    pool = [hashmix(words[i] if i < len(words) else 0) for i in range(_POOL_SIZE)]
    for i_src in range(_POOL_SIZE):  # every pool word into every other
        for i_dst in range(_POOL_SIZE):
            if i_src != i_dst:
                pool[i_dst] = _mix(pool[i_dst], hashmix(pool[i_src]))
    for word in words[_POOL_SIZE:]:  # entropy beyond the pool: each word into every pool word
        for i_dst in range(_POOL_SIZE):
            pool[i_dst] = _mix(pool[i_dst], hashmix(word))
    value = pool[0] ^ _INIT_B  # generate_state: the first pool word through the output hash
    value = (value * ((_INIT_B * _MULT_B) & _MASK32)) & _MASK32
    return value ^ (value >> _XSHIFT)
