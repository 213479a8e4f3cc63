"""Adaptive campaigns (`[campaign.adaptive]`): the plan of seeds and rungs, the pure decision at a rung, the
Tune scheduler and searcher that act on it, and the simulation that measures the decision."""
