#!/usr/bin/env bash
# Installs everything flowdata needs on a fresh Debian machine (Python 3.11, root):
# system packages (graphviz), a virtual environment in .venv, and the pinned Python
# packages from constraints.txt. Safe to run again: it skips work already done.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v dot >/dev/null 2>&1; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing graphviz (system package)"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null
    else
        echo "setup: 'dot' not found and cannot apt-get; pictures will be DOT source only" >&2
    fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv"
    "$PY" -m venv .venv
fi

# Reinstall only when the pins or the project metadata change.
stamp=.venv/.flowdata-installed
want=$(cat constraints.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "setup: installing pinned packages (first run downloads torch, several GB)"
    # An ordinary editable install: the build backend (hatchling) writes a plain .pth
    # path, which mypy and pyright read from any folder.
    .venv/bin/pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev]'
    echo "$want" > "$stamp"
fi
