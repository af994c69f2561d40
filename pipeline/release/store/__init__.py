"""Store backends: the protocol (base), a local directory, S3."""
