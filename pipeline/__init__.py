"""serve-pipeline: take a trained model to production through measured gates."""

__version__ = "0.1.0"
