"""Keyed and operator state of one subtask: the backends (hashmap, RocksDB) and their registry,
TTL handles, operator state."""
