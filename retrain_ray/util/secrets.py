"""Keeping secrets out of everything retrain-ray writes: manifests, snapshots, logs, errors.

Two kinds of secret reach a config: values under secret-looking keys (`api_key`, `token`,
`password`, ...) and credentials inside URLs (`https://user:pass@host/...`,
`...?api_key=...&token=...`). `redact` handles both in a JSON-like value; `scrub` handles the
second in free text (error messages, URLs shown to the user). Redaction by key name alone missed
URL credentials (issue 15): they reached `manifest.json`, Tune's `tuner.pkl` and every run's
`run_meta.json`.

A redacted snapshot cannot be resumed by itself: `restore_secrets` puts the real values back from a
freshly loaded config, only where the fresh value redacts to the same text (same host, same keys),
so a snapshot never silently picks up another endpoint's credentials.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

REDACTED = "***redacted***"
# whole words of a key name: `hf_token`, `api_key`, `auth`, but not `max_tokens` or `tokenizer`
SECRET_NAME = re.compile(
    r"(api[_-]?key|private[_-]?key|access[_-]?key|(^|[_.-])(token|secret|password|passwd|credentials?|auth|signature)"
    r"($|[_.-]))",
    re.IGNORECASE,
)
# scheme://userinfo@  (userinfo has no '/', '@' or whitespace)
_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s'\"]+)@")
# ?name=value or &name=value where the name looks secret (key, sig, token, ...)
_SECRET_QUERY = re.compile(
    r"(?P<name>[?&;][^=&#\s'\"]*(?:key|token|secret|password|passwd|credential|auth|sig)[^=&#\s'\"]*)="
    r"(?P<value>[^&#\s'\"]+)",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def scrub(text: str) -> str:
    """`text` with URL user-info and secret-looking query values replaced by REDACTED."""
    if "://" not in text and "=" not in text:
        return text
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    return _SECRET_QUERY.sub(lambda m: f"{m['name']}={REDACTED}", text)


def _secret_leaf(key: Any, value: Any) -> bool:
    """Secrets are text: numbers and flags under a secret-looking name are settings, kept."""
    return isinstance(key, str) and is_secret_name(key) and isinstance(value, str) and value != ""


def redact(value: Any) -> Any:
    """A copy of a JSON-like value: secret-looking keys' values and URL credentials replaced."""
    if isinstance(value, Mapping):
        return {k: REDACTED if _secret_leaf(k, v) else redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return scrub(value)
    return value


def has_redactions(value: Any) -> bool:
    if isinstance(value, Mapping):
        return any(has_redactions(v) for v in value.values())
    if isinstance(value, list):
        return any(has_redactions(v) for v in value)
    return isinstance(value, str) and REDACTED in value


def restore_secrets(snapshot: Any, fresh: Any, path: str = "") -> tuple[Any, list[str]]:
    """`snapshot` with each redacted value taken from `fresh`; also the dotted paths it could not fill.

    A value is filled only where `redact(fresh value)` equals the snapshot's value, so the URL's
    host, path and non-secret parts must match.
    """
    if isinstance(snapshot, Mapping):
        out, missing = {}, []
        other = fresh if isinstance(fresh, Mapping) else {}
        for k, v in snapshot.items():
            out[k], lost = restore_secrets(v, other.get(k), f"{path}.{k}" if path else str(k))
            if _secret_leaf(k, other.get(k)) and v == REDACTED:
                out[k], lost = other[k], []
            missing += lost
        return out, missing
    if isinstance(snapshot, list):
        others = fresh if isinstance(fresh, list) and len(fresh) == len(snapshot) else [None] * len(snapshot)
        pairs = [restore_secrets(v, o, f"{path}[{i}]") for i, (v, o) in enumerate(zip(snapshot, others, strict=True))]
        return [p[0] for p in pairs], [m for p in pairs for m in p[1]]
    if isinstance(snapshot, str) and REDACTED in snapshot:
        if isinstance(fresh, str) and redact(fresh) == snapshot:
            return fresh, []
        return snapshot, [path]
    return snapshot, []
