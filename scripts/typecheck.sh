#!/usr/bin/env bash
# mypy --strict over the package. The root folders install as statekit.* through an
# editable-install import hook that mypy cannot follow, so check a link tree instead.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir "$tree/statekit"
for part in statefmt readers writers flink runtime spark cli; do ln -s "$PWD/$part" "$tree/statekit/$part"; done
cd "$tree"
exec "$OLDPWD/.venv/bin/python" -m mypy --strict --config-file "$OLDPWD/pyproject.toml" -p statekit "$@"
