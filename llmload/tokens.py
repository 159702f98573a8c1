"""The simulated server's tokenizer, shared with the client's prompt synthesiser.

A token is a run of word characters or one punctuation character (`\\w+|[^\\w\\s]`). The simulated
server counts prompts and emits answers with this rule, so a prompt synthesised to N tokens is served
as exactly N tokens there; against real servers the client asks their `/tokenize` or calibrates.
"""

from __future__ import annotations

import re

__all__ = ["TOKEN_PATTERN", "count_tokens", "split_tokens"]

TOKEN_PATTERN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Tokens in `text` by the sim's rule.

    >>> count_tokens("What is 2+2? Answer with a number.")
    11
    """
    return sum(1 for _ in TOKEN_PATTERN.finditer(text))


def split_tokens(text: str) -> list[str]:
    """The tokens of `text` by the sim's rule."""
    return TOKEN_PATTERN.findall(text)
