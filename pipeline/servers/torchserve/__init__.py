"""TorchServe: config.properties, the .mar archive, the process and its statistics."""
