"""Gates computed from measurements: latency percentile verdicts, memory growth."""
