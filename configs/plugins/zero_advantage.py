"""An advantage mode that cannot learn: every completion's advantage is 0, so no step trains.

`configs/adaptive-campaign.toml` names it (`advantage_mode = "zero_advantage.zero"`, found under
`[plugins] search_paths = ["configs/plugins"]`) as the hopeless condition its first rung must stop.
"""


def zero(rewards):
    return [0.0 for _ in rewards]
