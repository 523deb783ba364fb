"""statekit.statefmt."""
