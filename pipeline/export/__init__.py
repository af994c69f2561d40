"""Releases as a deployment target takes them: KServe objects (kserve)."""
