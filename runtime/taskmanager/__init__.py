"""Where subtasks run: building a job's tasks (gates, writers, channels, restore slices) for the
subtasks a host runs, and the TaskManager process that runs them for a job master in another
process (slots, the network stack's endpoints, heartbeats). The thread executor deploys through
the same code into this process."""
