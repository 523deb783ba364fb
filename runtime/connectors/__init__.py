"""Sources and sinks that come with the runtime: files, sequences and collections; the
two-phase-commit sink base, the exactly-once file sink, PostgreSQL. Imports only ``api``."""
