"""Where the Serve endpoint listens: loopback unless the caller opts in with `allow_non_loopback=True`
(the endpoint has no authentication). Its own module: Serve's HTTP options are fixed for a Ray
session once Serve starts, so the wildcard endpoint cannot share Serve with tests/serve/test_serve_endpoint.py's."""

from __future__ import annotations

import httpx
import pytest
from helpers import free_port

MODEL = "builtin:tiny"


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "example.com"])
def test_a_non_loopback_host_without_the_opt_in_is_refused_before_serve_starts(host):
    from retrain_ray.serve import start_inference_endpoint

    with pytest.raises(ValueError, match="allow_non_loopback=True") as err:
        start_inference_endpoint(MODEL, host=host, port=1)
    assert repr(host) in str(err.value) and "no authentication" in str(err.value)


def test_with_the_opt_in_the_endpoint_listens_on_every_interface(ray_4cpu_4gpu):
    import psutil

    from retrain_ray.serve import start_inference_endpoint, stop_inference_endpoint

    port = free_port()
    url = start_inference_endpoint(MODEL, host="0.0.0.0", port=port, name="exposed", allow_non_loopback=True)
    try:
        bound = {c.laddr.ip for c in psutil.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == port}
        assert bound == {"0.0.0.0"}, bound  # measured, not assumed
        assert url == f"http://127.0.0.1:{port}/exposed"  # a URL this machine can call
        models = httpx.get(f"{url}/v1/models", timeout=30).json()
        assert MODEL in str(models)
    finally:
        stop_inference_endpoint()
