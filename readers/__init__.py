"""statekit.readers."""
