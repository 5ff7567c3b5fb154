#!/bin/sh
# Builds a Python plugin into a wasm32-wasip2 component with componentize-py
# (`pip install componentize-py==0.25.1`):
#
#   plugins/python/build.sh WORLD DIR OUT.wasm
#
# WORLD is admission-policy, probe-handler or pod-source; DIR holds the plugin's app.py
# (and any modules it imports). The WIT and this SDK are taken from the checkout this
# script is in.
set -eu
if [ $# -ne 3 ]; then
    echo "usage: $0 admission-policy|probe-handler|pod-source DIR OUT.wasm" >&2
    exit 2
fi
world=$1 dir=$2 out=$3
sdk=$(cd "$(dirname "$0")" && pwd)
case $world in
admission-policy | probe-handler | pod-source) ;;
*) echo "$0: unknown world $world (admission-policy, probe-handler or pod-source)" >&2; exit 2 ;;
esac
[ -f "$dir/app.py" ] || { echo "$0: $dir/app.py: no such file" >&2; exit 2; }
command -v componentize-py >/dev/null || {
    echo "$0: componentize-py not found: pip install componentize-py==0.25.1" >&2
    exit 2
}
# What the build reads besides the source is held still (plugins/reproducible/):
#  - the author's folder and the SDK are copied into a directory of the build's own, so
#    the guest's bytecode cache is written there, not into the author's tree (a later
#    build would load it instead of compiling: different bytes);
#  - an empty site-packages stands for the host's (componentize-py adds the host's own
#    to the guest's path, so whatever pip installed there would be in the snapshot);
#  - random bytes, clocks and file times through deterministic.so (when a C compiler can
#    build it), one tokio worker, the host's hash seed fixed.
stage=$(mktemp -d "${TMPDIR:-/tmp}/wasmlet-py-XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/app" "$stage/sdk" "$stage/venv/lib/python3/site-packages"
cp -R "$dir/." "$stage/app/"
cp -R "$sdk/wasmlet_plugin" "$stage/sdk/"
find "$stage" -name __pycache__ -prune -exec rm -rf {} +
preload=$(sh "$sdk/../reproducible/preload.sh") || preload=
case $out in /*) ;; *) out=$PWD/$out ;; esac
VIRTUAL_ENV=$stage/venv TOKIO_WORKER_THREADS=1 PYTHONHASHSEED=0 LD_PRELOAD=$preload \
    componentize-py -d "$sdk/../../wit" -w "$world" componentize app \
    -p "$stage/app" -p "$stage/sdk" -o "$out"
