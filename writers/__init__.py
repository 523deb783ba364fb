"""statekit.writers."""
