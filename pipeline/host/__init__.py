"""`serve-pipeline serve ENV`: the release an environment's pointer is on, served on this
host behind one stable HTTP port, swapped when the pointer moves (after readiness and
parity pass on the new release)."""
