"""Run and campaign names: each becomes a directory name (`<root>/<campaign>/runs/<run>/`, Tune's trial
directory), so each must be one plain directory name.

A run's name is `{label}_s{seed}` and its label is built from the condition's values
(`{advantage_mode}+{transform_mode}~key=value,...`), so an override value such as `"a/b"` or `".."` would
otherwise reach the file system (a directory outside the campaign) or stop Ray Tune after Ray started
and a half-written campaign directory was left. The rules, checked when the config is loaded and again
when a campaign is planned, before anything is written or Ray starts:

* not empty, not starting with `.` (no hidden or relative names);
* no `/` or `\\` (path separators), no `..` anywhere, no control characters (newline, tab, NUL);
* at most `MAX_NAME_BYTES` bytes in UTF-8 (file systems allow 255; Tune adds to trial directory names).
"""

from __future__ import annotations

from typing import Any

MAX_NAME_BYTES = 200
RULES = (f"a plain directory name: not empty, no '/' or '\\', no '..', no control characters, not starting "
         f"with '.', at most {MAX_NAME_BYTES} bytes")


def run_name(label: str, seed: int) -> str:
    return f"{label}_s{seed}"


def _bad_characters(text: str) -> str:
    """What in `text` may not be part of a name ("" when nothing)."""
    found = [repr(c) for c in ("/", "\\") if c in text]
    if ".." in text:
        found.append("'..'")
    controls = sorted({c for c in text if ord(c) < 32 or ord(c) == 127})
    found += [repr(c) for c in controls]
    return ", ".join(found)


def name_problem(name: str) -> str:
    """Why `name` cannot be a directory name ("" when it can)."""
    if not name.strip():
        return "it is empty"
    bad = _bad_characters(name)
    if bad:
        return f"it contains {bad}"
    if name.startswith("."):
        return "it starts with '.'"
    size = len(name.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        return f"it is {size} bytes long (at most {MAX_NAME_BYTES})"
    return ""


def _pieces(advantage_mode: str, transform_mode: str, overrides: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, text it puts in the label) for each part of a condition's label."""
    parts = [("advantage_mode", advantage_mode), ("transform_mode", transform_mode)]
    return parts + [(key, f"{key}={value}") for key, value in sorted(overrides.items())]


def condition_name_problems(index: int, label: str, advantage_mode: str, transform_mode: str,
                            overrides: dict[str, Any], seeds: list[int]) -> list[str]:
    """Problems of the run names condition `index` gives with `seeds`, each naming the key at fault."""
    where = f"campaign.conditions[{index}] ({label!r})"
    problems = []
    for key, text in _pieces(advantage_mode, transform_mode, overrides):
        bad = _bad_characters(text)
        if bad:
            problems.append(f"{where}: `{key}` puts {bad} into its run names ({run_name(label, seeds[0] if seeds else 0)!r}); "
                            f"a run name becomes a directory name, so it must be {RULES}. Fix: give `{key}` a value "
                            "without them (the run name is `{advantage_mode}+{transform_mode}~key=value,..._s{seed}`)")
    if problems:
        return problems
    longest = max((run_name(label, s) for s in seeds), key=len, default=label)
    problem = name_problem(longest)
    if problem:
        keys = ", ".join(f"`{k}`" for k in sorted(overrides)) or "`advantage_mode`, `transform_mode`"
        shown = longest if len(longest) <= 60 else f"{longest[:60]}..."
        problems.append(f"{where}: its run name {shown!r} cannot be a directory name: {problem}. Fix: "
                        f"shorten the values of {keys} (the run name is `{{advantage_mode}}+{{transform_mode}}"
                        "~key=value,..._s{seed}`), or set long values in the base config instead of the condition")
    return problems
