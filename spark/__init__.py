"""Everything of statekit that runs on Apache Spark (the only package that imports pyspark).

Modules: ``session`` (the one SparkSession of a process), ``source`` (the ``statekit``
Python data source), ``export`` and ``flink_export`` (statekit's and Flink's snapshots to
tables), ``formats`` (the one function that writes a table: Parquet, CSV, JSON Lines),
``diff`` (the Spark diff engine), ``bootstrap`` (savepoints from large inputs), ``engine``
(the one place that chooses between the local and the Spark engine, and between statekit's
and Flink's exporter). pyspark is imported only inside
the functions that need it, so importing this package starts no JVM.
"""
