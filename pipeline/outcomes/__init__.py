"""Each stage's metrics as a typed value: a frozen dataclass whose fields are the metric
names (`pipeline/metric_names.py`), read from and written to a record's flat
`stages[i].metrics` mapping unchanged."""
