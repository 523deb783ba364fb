"""One subtask: its thread's loop over the input gate (the mailbox), the barrier handler, its
part of a checkpoint (synchronous snapshot, asynchronous write, acknowledgement), task-side
event time and metrics."""
