"""The resex per-host agent: control loop, latency intake, journal, metrics, CLI."""
