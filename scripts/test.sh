#!/usr/bin/env bash
# The whole test suite: installs what it needs, then runs every stage (pytest, then mypy
# --strict on the package) even when an earlier one fails, and reports all of them at the
# end; the exit status is non-zero when any stage failed. Arguments go to pytest (for
# example `-m "not slow"`, the fast tier).
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || { echo "test.sh: setup failed; no stage ran" >&2; exit 1; }

names=()
codes=()
stage() {  # stage NAME COMMAND...: runs one stage and records its status
    local name=$1 start=$SECONDS
    shift
    echo "== $name"
    "$@"
    local rc=$?
    names+=("$name ($((SECONDS - start)) s)")
    codes+=("$rc")
}

stage pytest .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
stage "mypy --strict" .venv/bin/python -m mypy

failed=0
echo "== stages"
for i in "${!names[@]}"; do
    if [ "${codes[$i]}" = 0 ]; then
        echo "ok      ${names[$i]}"
    else
        echo "FAILED  ${names[$i]}: exit ${codes[$i]}"
        failed=1
    fi
done
exit "$failed"
