#!/usr/bin/env bash
# The whole test suite: installs what it needs, then runs pytest, mypy and pyright.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
.venv/bin/python -m mypy
