"""Measurement: load generation, the wire clients (`wire/`), windows, capacity steps against
a server, memory. The searches they feed are in `pipeline.statistics`."""
