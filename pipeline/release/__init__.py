"""Releases: the store, manifests and pointers, promotion, verification, regression."""
