"""NVIDIA Triton: config.pbtxt and model repository, the process, container, TensorRT."""
