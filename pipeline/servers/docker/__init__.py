"""Docker: the engine (build, run, push) and deterministic serving-image contexts."""
