#!/usr/bin/env bash
# Install PyFlink (the `apache-flink` package) into its own virtualenv, never into .venv.
#
#   scripts/install_pyflink.sh [VERSION]      default 2.3.0 -> .venv-flink
#                                              1.20.x       -> .venv-flink-1.20 (Python 3.11)
#                                              1.16.x       -> .venv-flink-1.16 (Python 3.9, pyenv)
#
# PyFlink runs a JVM: Java 17 must be on PATH. Releases before 1.16 bundle an Apache Beam
# that refuses Java 17, so they are not supported here. PyFlink 1.16 also needs the JVM
# --add-opens flags of newer Flink releases; scripts/gen_flink_fixtures.py sets them through
# JAVA_TOOL_OPTIONS.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="${1:-2.3.0}"
case "$VERSION" in
  2.*)    VENV=.venv-flink;      PY=python3.11 ;;
  1.20.*|1.19.*|1.18.*|1.17.*) VENV=".venv-flink-${VERSION%.*}"; PY=python3.11 ;;
  1.16.*) VENV=.venv-flink-1.16; PY=python3.9 ;;
  *) echo "install_pyflink.sh: PyFlink $VERSION is not supported (1.16 or later; older releases refuse Java 17)" >&2
     exit 2 ;;
esac
command -v java >/dev/null || { echo "install_pyflink.sh: java (17) is not on PATH" >&2; exit 2; }
if ! command -v "$PY" >/dev/null; then
  echo "install_pyflink.sh: $PY not found (pyenv install ${PY#python})" >&2; exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "apache-flink==$VERSION"
"$VENV/bin/python" -c "import pyflink, sys; print('PyFlink', '$VERSION', 'in', sys.prefix)"
