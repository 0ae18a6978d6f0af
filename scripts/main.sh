#!/usr/bin/env bash
# The main job: installs what it needs, then runs the bundled example dataflow.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/flowdata check flowdata_modules.example
.venv/bin/flowdata run flowdata_modules.example --outputs summary,total --input n=1000 --executor processes
