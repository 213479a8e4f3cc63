"""Live per-run gauges on Ray's metrics endpoint and the Grafana dashboard generated from them."""
