"""Measured comparisons (not tests): each prints ratios measured in one run."""
