"""Statistics the measurements and the gates share: order-statistic bounds, distributions, the
sequential window loop. Below both `pipeline.measure` and `pipeline.gates`."""
