"""LIKE matches in linear time and agrees with a reference on every small pattern (issue 12 item 12)."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from sbdlq.sqlfilter.like import like_matcher


def _reference(pattern: str, escape: str | None, text: str) -> bool:
    """LIKE through a regex: fine on the short strings here, exponential on hostile ones."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if escape is not None and ch == escape:
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.fullmatch("".join(out), text, re.DOTALL) is not None


def test_agrees_with_reference_on_every_small_case() -> None:
    alphabet = "ab%_"
    texts = ["".join(t) for n in range(5) for t in itertools.product("ab\n", repeat=n)]
    for n in range(5):
        for pattern in ("".join(p) for p in itertools.product(alphabet, repeat=n)):
            matcher = like_matcher(pattern)
            for text in texts:
                assert matcher(text) == _reference(pattern, None, text), (pattern, text)


@pytest.mark.parametrize("seed", range(3))
def test_agrees_with_reference_with_escapes(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(2000):
        pattern = "".join(rng.choice(["a", "b", "%", "_", "!%", "!_", "!!", "%%"]) for _ in range(rng.randint(0, 6)))
        text = "".join(rng.choice("ab%_!") for _ in range(rng.randint(0, 8)))
        assert like_matcher(pattern, "!")(text) == _reference(pattern, "!", text), (pattern, text)
