"""The one rule for a plugin reference's syntax, shared by the config schema (which checks a name's shape)
and the plugin loader (which imports it): both sit on layers that may import only `util/`."""

from __future__ import annotations

import re

_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*[:.][A-Za-z_]\w*$")


def is_dotted_path(name: str) -> bool:
    """True for a plugin reference: identifiers joined by dots, the last one after `.` or `:`
    (`my_pkg.transforms:scaled`, `my_pkg.transforms.scaled`); `0.5`, `a..b` or `my-pkg.x` are not."""
    return bool(_DOTTED.match(name))
