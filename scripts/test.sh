#!/usr/bin/env bash
# Install statekit with every extra into .venv and run the whole test suite (Spark, S3 and
# PostgreSQL tests included; they need Java 17 on the PATH and the PostgreSQL server binaries,
# which .ci/run installs). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh "test,spark,connect,rocksdb,postgres"
export SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/python -m pytest "$@"
