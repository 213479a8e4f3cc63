"""Answer extraction: the content of the last `\\boxed{...}` in a text.

Exactly the original's rule (spec section 9): find the *last* `\\boxed{` occurrence, scan forward
counting brace depth to the matching `}`; if the braces never balance, return the rest of the text;
strip the result; return "" when there is no `\\boxed{`. `\\fbox{}` and `\\boxed 5` are not handled
(as in the original).
"""

from __future__ import annotations

BOXED_OPEN = "\\boxed{"


def extract_boxed(text: str) -> str:
    """Return the stripped content of the last `\\boxed{...}` in `text`, or "" if there is none."""
    start = text.rfind(BOXED_OPEN)
    if start < 0:
        return ""
    body_start = start + len(BOXED_OPEN)
    depth = 1
    for i in range(body_start, len(text)):
        char = text[i]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[body_start:i].strip()
    return text[body_start:].strip()


def boxed(answer: str) -> str:
    """Wrap an answer the way the rewards expect to find it: `\\boxed{answer}`."""
    return f"{BOXED_OPEN}{answer}}}"
