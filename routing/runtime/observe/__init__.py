"""What the gateway tells operators: metrics, spans, logs, the dashboard's feed, probes and alerts (README.md)."""
