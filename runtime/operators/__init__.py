"""What runs a user function inside a subtask: the operator base (lifecycle, snapshots),
source, one-input and two-input operators, timers, event time at the sources, and the window
operator."""
