#!/bin/sh
# Builds a Python plugin into a wasm32-wasip2 component with componentize-py
# (`pip install componentize-py==0.25.1`), from this checkout's SDK:
#
#   plugins/python/build.sh WORLD DIR OUT.wasm
#
# WORLD is admission-policy, probe-handler or pod-source; DIR holds the plugin's app.py.
# The same as the SDK package's `wasmlet-plugin-build` (wasmlet_plugin/_build.py says
# how the build is kept reproducible), with the WIT taken from the checkout.
set -eu
sdk=$(cd "$(dirname "$0")" && pwd)
exec env PYTHONPATH="$sdk${PYTHONPATH:+:$PYTHONPATH}" python3 -m wasmlet_plugin._build "$@"
