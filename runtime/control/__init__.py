"""Job control around the runtime: the registry of jobs, the REST endpoint, the launcher of
job files, submission (attached and detached runs) and the client used by the CLI."""
