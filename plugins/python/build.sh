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
exec componentize-py -d "$sdk/../../wit" -w "$world" componentize app \
    -p "$dir" -p "$sdk" -o "$out"
