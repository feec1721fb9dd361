"""The engine and its per-segment step, the scheduling policy and its measures, the queue, the joins between segments, and the two schedulers: sequential and concurrent."""
