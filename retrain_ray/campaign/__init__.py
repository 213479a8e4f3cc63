"""Campaigns on Ray: `Campaign(...).run()` runs conditions x seeds as one Ray Tune trial per run."""

from retrain_ray.campaign.driver import Campaign
from retrain_ray.campaign.plan import CampaignError
from retrain_ray.campaign.results import CampaignResults, RunResult

__all__ = ["Campaign", "CampaignError", "CampaignResults", "RunResult"]
