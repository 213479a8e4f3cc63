"""A model's Jinja chat template compiled as transformers compiles it, without importing transformers.

transformers renders chat templates in an `ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True)` with the `loopcontrols` extension, a `tojson` filter that does not escape HTML,
and the globals `raise_exception` and `strftime_now`; the same environment here gives the same text.
Its `{% generation %}` tag (assistant masks for SFT) is not reproduced: such templates load through
transformers' tokenizer.
"""

from __future__ import annotations

import json
import re
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

_GENERATION_TAG = re.compile(r"\{%-?\s*(end)?generation\s*-?%\}")


def template_problem(template: object) -> str | None:
    """Why this chat template needs transformers' tokenizer, or None (no template is fine)."""
    if template is None:
        return None
    if not isinstance(template, str):
        return "it has several named chat templates"
    if _GENERATION_TAG.search(template):
        return "its chat template has {% generation %} blocks"
    return None


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value: object, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def compile_chat_template(template: str) -> jinja2.Template:
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=[jinja2.ext.loopcontrols])
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    return environment.from_string(template)
