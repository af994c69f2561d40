"""Measurement: load generation, the wire clients (`wire/`), windows and how they are sent
(`sender.py`) and what (`targets.py`), capacity steps against a server, memory. Everything
here takes what it needs as parameters, never a run's context. The searches they feed are
in `pipeline.statistics`."""
