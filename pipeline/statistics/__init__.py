"""Statistics the measurements and the gates share, without I/O: order-statistic bounds,
distributions, the sequential window loop, whether windows agreed, the knee search over
probes, and the capacity search with its hold verdicts (driven through callbacks that measure
a step and settle the server). Below both `pipeline.measure` and `pipeline.gates`."""
