"""statekit.cli."""
