"""`shapes.steps.derive_seed`: numpy's `SeedSequence` without numpy, checked against numpy itself."""

from __future__ import annotations

import random

import numpy as np
import pytest

from shapes.steps import _seed_sequence_word, derive_seed


def _numpy_seed(run_seed: int, index: int) -> int:
    """What `derive_seed` returned while it called numpy (the seeds of every plan written before)."""
    return int(np.random.SeedSequence([int(run_seed) & 0xFFFFFFFF, int(index)]).generate_state(1)[0])


def test_derive_seed_is_numpys_seed_sequence():
    rng = random.Random(42)
    cases = [(0, 0), (1, 0), (0, 1), (2**32 - 1, 7), (-1, 3), (12345, 2**32 + 5), (2**40, 2**70)]
    cases += [(rng.getrandbits(64) - 2**63, rng.randrange(500)) for _ in range(2000)]
    assert [derive_seed(s, i) for s, i in cases] == [_numpy_seed(s, i) for s, i in cases]


@pytest.mark.parametrize("words", [1, 3, 4, 5, 9])
def test_the_pool_mixes_any_entropy_as_numpy_does(words):
    """Fewer words than the pool of 4 (padded), as many, and more (mixed in after), of any size."""
    rng = random.Random(words)
    for _ in range(100):
        entropy = [rng.getrandbits(rng.choice([1, 32, 33, 64, 100])) for _ in range(words)]
        assert _seed_sequence_word(entropy) == int(np.random.SeedSequence(entropy).generate_state(1)[0])


def test_a_negative_word_is_refused_as_numpy_refuses_it():
    with pytest.raises(ValueError):
        _seed_sequence_word([1, -2])
    with pytest.raises(ValueError):
        np.random.SeedSequence([1, -2])
