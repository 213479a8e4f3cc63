"""Environment variables of the worker processes of a campaign's Ray, and the runtime env of its
service actors (recorder, start gate, throttle, back-pressure).

A campaign's local Ray imports `PRELOAD_MODULE` in every worker process as it starts
(campaign/local_ray.py), which imports the modules named in `PRELOAD_ENV_VAR`, unless the process
hosts a service actor (`SERVICE_ENV_VAR`): a service actor never needs torch. Being a runtime env of
its own, `SERVICE_RUNTIME_ENV` also keeps these actors off the worker processes Ray starts ahead,
which are left to the trials.
"""

PRELOAD_MODULE = "retrain_ray.campaign.preload"
PRELOAD_ENV_VAR = "RETRAIN_RAY_PRELOAD"
SERVICE_ENV_VAR = "RETRAIN_RAY_SERVICE_ACTOR"
SERVICE_RUNTIME_ENV = {"env_vars": {SERVICE_ENV_VAR: "1"}}
