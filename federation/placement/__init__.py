"""Where a task should run: candidates from a snapshot, the policies that rank them, the
digital twin, run-time and lateness models, and drafting envelopes from descriptions."""
