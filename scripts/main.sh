#!/usr/bin/env bash
# The main job: installs what it needs, checks the bundled modules, then runs the media demo
# (generated audio and image datasets, statistics, training through flowdata's loaders).
# Extra arguments go to the demo, e.g. `bash scripts/main.sh --epochs 2 --out /tmp/demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
for module in audio image example; do .venv/bin/flowdata check "flowdata_modules.$module"; done
.venv/bin/python examples/media_demo.py "$@"
