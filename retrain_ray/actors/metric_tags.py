"""Ray metric tags are ASCII (its Cython layer encodes them so): a campaign, run or condition name that is
not (`ablation-ü`, `ünï漢字🚀 x`) is spelled in ASCII for the tags only, readable and still one to one.

The names themselves stay as written everywhere else: manifest, results, directories, actor names.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Mapping


def ascii_tag(text: str) -> str:
    """`text` itself when ASCII; else its ASCII letters (accents dropped, others as `?`) and a short hash
    of the original, so two names that differ only outside ASCII keep two tags."""
    if text.isascii():
        return text
    folded = unicodedata.normalize("NFKD", text)
    readable = "".join(c if c.isascii() else "?" for c in folded if not unicodedata.combining(c))
    digest = hashlib.blake2s(text.encode("utf-8"), digest_size=3).hexdigest()
    return f"{readable}~{digest}"


def ascii_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """Every value of a metric's tags through `ascii_tag`."""
    return {key: ascii_tag(value) for key, value in tags.items()}
