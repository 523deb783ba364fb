"""Read Apache Flink snapshots (``_metadata`` v3-v7) without a JVM."""
