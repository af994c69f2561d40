"""Measurement: load generation, clients, windows, stability, knee and capacity, memory."""
