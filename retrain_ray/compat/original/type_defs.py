"""The original's type aliases that plugin signatures use (`retrain.type_defs`)."""

from __future__ import annotations

from typing import Any

JSONObject = dict[str, Any]
PromptLike = str | list[dict[str, Any]]
"""A prompt: plain text, or chat messages ({"role": ..., "content": ...})."""
ExampleInfoLike = dict[str, Any] | None
SampleBatch = list[list[tuple[list[int], list[float]]]]
"""Per prompt, per sample: (completion token ids, their log-probabilities)."""
EnrichedSampleBatch = list[list[tuple[list[int], list[float], list[float] | None]]]
"""As SampleBatch, with per-token entropies (None when the backend has none)."""
