#!/usr/bin/env bash
# The toolchains of the Python and JavaScript plugin SDKs, pinned, installed if needed:
# componentize-py (PyPI) in a virtual environment under plugins/target/toolchains/python,
# and plugins/js's npm packages (componentize-js, jco, esbuild, typescript: `npm ci`).
#
#   scripts/plugin-toolchains.sh     install what is missing; print the directory that holds
#                                    componentize-py (put it on PATH to build Python plugins)
set -euo pipefail

PROG=plugin-toolchains.sh
COMPONENTIZE_PY=0.25.1
die() { echo "$PROG: $*" >&2; exit 1; }

repo=$(cd "$(dirname "$0")/.." && pwd)
venv=$repo/plugins/target/toolchains/python

if ! "$venv/bin/componentize-py" --version 2>/dev/null | grep -qx "componentize-py $COMPONENTIZE_PY"; then
    command -v python3 >/dev/null || die "python3 not found (the Python SDK needs CPython 3.11 or later)"
    echo "$PROG: installing componentize-py $COMPONENTIZE_PY into $venv" >&2
    python3 -m venv "$venv" >&2 || die "python3 -m venv $venv failed"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$COMPONENTIZE_PY" >&2 \
        || die "pip install componentize-py==$COMPONENTIZE_PY failed"
fi

js=$repo/plugins/js
if [ ! -x "$js/node_modules/.bin/componentize-js" ] || [ "$js/package-lock.json" -nt "$js/node_modules/.package-lock.json" ]; then
    command -v npm >/dev/null || die "npm not found (the JavaScript SDK needs Node.js 20 or later)"
    echo "$PROG: installing the JavaScript toolchain (npm ci in $js)" >&2
    npm ci --prefix "$js" --no-audit --no-fund --loglevel=error >&2 || die "npm ci in $js failed"
fi

echo "$venv/bin"
