"""serve.yaml: pydantic models, loading with overlays, cross-key rules, units, positions."""
