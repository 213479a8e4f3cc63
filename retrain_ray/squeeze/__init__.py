"""LoRA-Squeeze (spec 5.4): rank analysis and compression of a trained LoRA adapter.

    report = squeeze_run("logs/train", SqueezeSettings(min_variance_retention=0.95))
    report.recommended_rank, report.mean_retention[4], report.output_path

`squeeze` holds the linear algebra (no files), reads and writes PEFT adapter directories, and
ties it to the adapter's files for a run directory or an adapter.
"""

from retrain_ray.squeeze.squeeze import (
    LayerSpectrum,
    SqueezeError,
    SqueezeReport,
    SqueezeSettings,
    compress_layer,
    default_target_ranks,
    find_adapter,
    layer_spectrum,
    recommend_rank,
    retained_energy,
    squeeze_adapter,
)

__all__ = [
    "LayerSpectrum", "SqueezeError", "SqueezeReport", "SqueezeSettings", "compress_layer", "default_target_ranks",
    "find_adapter", "layer_spectrum", "recommend_rank", "retained_energy", "squeeze_adapter",
]
