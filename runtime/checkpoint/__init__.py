"""Checkpoints as data: barriers and their options, where snapshots are stored, the handles a
task acknowledges, in-flight channel state, the shared-file registry, and restore (a snapshot
mapped onto a new job)."""
