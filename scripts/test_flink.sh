#!/usr/bin/env bash
# Run the tests that restore savepoints statekit rewrote or wrote in real Apache Flink (pytest -m flink:
# tests/flink/test_flink_rewrite_restore.py, 7 Flink jobs, 6 to 21 minutes on 2 cores by load;
# tests/flink/test_flink_write_restore.py, 7 jobs in one PyFlink process and one JVM (javac), about
# 4.5 minutes at load 10 to 17; tests/flink/test_flink_java_restore.py, Tuple-keyed Java savepoints, one
# JVM, about 40 s; tests/flink/test_flink_sql_rescale_restore.py, a Flink SQL savepoint rescaled, 5 SQL jobs in
# one PyFlink process, about 1 minute). PyFlink is installed
# into .venv-flink first when it is missing (scripts/install_pyflink.sh; Java 17 on the PATH),
# never into statekit's .venv. Extra arguments go to pytest.
#
#   scripts/test_flink.sh                 # PyFlink 2.3.0
#   PYFLINK_VERSION=1.20.3 scripts/test_flink.sh    # into .venv-flink-1.20, used through STATEKIT_PYFLINK_PYTHON
#   scripts/test_flink.sh -k test_flink_sql_rescale_restore    # one module
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="${PYFLINK_VERSION:-2.3.0}"
case "$VERSION" in
  2.*) VENV=.venv-flink ;;
  *)   VENV=".venv-flink-${VERSION%.*}" ;;
esac
if ! "$VENV/bin/python" -c "import pyflink" 2>/dev/null; then
  scripts/install_pyflink.sh "$VERSION"
fi
if [ ! -x .venv/bin/python ]; then
  scripts/bootstrap.sh test
fi
export STATEKIT_PYFLINK_PYTHON="$PWD/$VENV/bin/python"
exec .venv/bin/python -m pytest -m flink tests/flink "$@"
