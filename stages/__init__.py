"""The pipeline's stages, one module each; the order lives in pipeline.runner.STAGES."""
