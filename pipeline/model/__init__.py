"""The model: where it comes from, the runtime loader shared with the served model, the
reference outputs and the tensors sent to it."""
