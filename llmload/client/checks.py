"""Answer checks (`quality` cases): contains, regex, exact, json_schema. Pure functions.

`check_answer(text, expect) -> (passed, reason)`; `reason` is empty when it passed and one line
saying what was wrong when it did not. `exact` compares after stripping surrounding whitespace;
`json_schema` first takes the answer as JSON (a fenced ```json block is unwrapped). Reasons never
quote the answer: under load they go into records, which hold no answer text.
"""

from __future__ import annotations

import json
import re

from llmload.config import Expect

__all__ = ["check_answer", "excerpt"]

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def excerpt(text: str, limit: int = 80) -> str:
    """The start of an answer, on one line, for messages shown to the user (never for records)."""
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[:limit] + "...")


def check_answer(text: str, expect: Expect) -> tuple[bool, str]:
    """Whether `text` meets `expect`, and why not."""
    if expect.contains is not None:
        if expect.contains in text:
            return True, ""
        return False, f"answer does not contain {expect.contains!r}"
    if expect.regex is not None:
        if re.search(expect.regex, text):
            return True, ""
        return False, f"answer does not match /{expect.regex}/"
    if expect.exact is not None:
        if text.strip() == expect.exact.strip():
            return True, ""
        return False, f"answer is not exactly {expect.exact!r}"
    schema = expect.json_schema or {}
    fenced = _FENCE.match(text)
    try:
        value = json.loads(fenced.group(1) if fenced else text)
    except ValueError:
        return False, "answer is not JSON"
    import jsonschema  # ~0.08 s of imports: only for a `json_schema` check (`Expect` loads it when it has one)

    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        return False, f"answer fails the JSON schema: {exc.message}"
    except jsonschema.SchemaError as exc:
        return False, f"the JSON schema is invalid: {exc.message}"
    return True, ""
