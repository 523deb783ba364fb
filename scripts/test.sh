#!/usr/bin/env bash
# Install statekit with every extra into .venv and run the whole test suite (Spark and S3
# tests included; they need Java 17 on the PATH). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh "test,spark,rocksdb"
export SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/python -m pytest "$@"
