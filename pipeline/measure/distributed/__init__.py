"""Load from several worker processes on Ray: the schedule split, the workers, the merge."""
