#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it: bootstrap, lint (ruff; import-linter for the floors),
# then every test (unit, property, CLI, and Mininet system tests). Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh || exit 1
.venv/bin/ruff check . || exit 1
.venv/bin/lint-imports --no-cache || exit 1  # the floors (pyproject.toml [tool.importlinter])
.venv/bin/python -m pytest "$@"
status=$?
if [ "$status" -eq 5 ]; then
    echo "test: pytest collected no tests; that is a failure, not a pass" >&2
    exit 1
fi
exit "$status"
