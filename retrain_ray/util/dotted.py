"""The one syntax rule of a plugin reference: `package.module:attribute` or `package.module.attribute`.

The plugin loader (plugins/loader.py) imports such names; the schema (config/) accepts them where a key takes a
component's name. Both ask this one function, kept in `util/` because `config/` may import only `util/`.
"""

from __future__ import annotations

import re

_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*[:.][A-Za-z_]\w*$")


def is_dotted_path(name: str) -> bool:
    """True for a plugin reference: identifiers joined by dots, the last one after `.` or `:`
    (`my_pkg.transforms:scaled`, `my_pkg.transforms.scaled`); `0.5`, `a..b` or `my-pkg.x` are not."""
    return bool(_DOTTED.match(name))
