"""`shapes.seedseq.first_state_word` against numpy's `SeedSequence`, the oracle: the plan's step seeds
(`shapes.steps.derive_seed`) must stay the words numpy gives, now computed without it."""

from __future__ import annotations

import random

import numpy as np
import pytest

from shapes.seedseq import first_state_word
from shapes.steps import derive_seed


def _numpy_word(entropy: list[int]) -> int:
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


#: the edges of the 32-bit words: zero, the largest word, a word over (two words), past the pool's four words
EDGES = [[0, 0], [0xFFFFFFFF, 0], [0, 0xFFFFFFFF], [2**32, 1], [2**64 + 3, 2**40], [7], [], [1, 2, 3, 4, 5],
         [0] * 9, [2**128 - 1]]


@pytest.mark.parametrize("entropy", EDGES, ids=str)
def test_the_edges_give_numpys_word(entropy):
    assert first_state_word(entropy) == _numpy_word(entropy)


def test_random_entropy_gives_numpys_word():
    rng = random.Random(42)
    for _ in range(500):
        entropy = [rng.choice((rng.randrange(2**32), rng.randrange(2**70), rng.randrange(16)))
                   for _ in range(rng.randrange(1, 8))]
        assert first_state_word(entropy) == _numpy_word(entropy), entropy


def test_step_seeds_are_numpys():
    """What `derive_seed` gave when it called numpy: the run seed's low 32 bits, then the step index."""
    for run_seed in (0, 1, 42, 2**32 + 5, 2**63 - 1):
        for index in (0, 1, 7, 1000):
            assert derive_seed(run_seed, index) == _numpy_word([run_seed & 0xFFFFFFFF, index])


def test_a_negative_word_is_refused_as_numpy_refuses_it():
    with pytest.raises(ValueError, match="non-negative"):
        np.random.SeedSequence([0, -1])
    with pytest.raises(ValueError, match="non-negative"):
        first_state_word([0, -1])
