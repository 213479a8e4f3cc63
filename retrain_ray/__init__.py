"""retrain-ray: Ray-distributed campaign orchestrator for RLVR runs on language models."""
__version__ = "0.1.0"
