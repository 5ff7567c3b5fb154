#!/bin/sh
# Hollow nodes: N wasmlet agents on one machine, each on an in-memory CRI runtime of its
# own (wasmlet-cri-sim), joined to the cluster a kubeconfig names — wasmlet's kubemark.
#
#   scripts/hollow-nodes.sh N KUBECONFIG [DIR]
#
# Nodes are named hollow-1 … hollow-N (HOLLOW_PREFIX changes the prefix); each keeps its
# socket, root dir, config and log under DIR/hollow-i (default /tmp/wasmlet-hollow).
# Pods bound to them "run" in the simulators. Ctrl-C (or SIGTERM) stops every agent and
# simulator; nothing is left running. Builds the binaries and the plugins first.
set -eu
if [ $# -lt 2 ]; then
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
N=$1
KUBECONFIG_FILE=$(realpath "$2")
DIR=${3:-/tmp/wasmlet-hollow}
PREFIX=${HOLLOW_PREFIX:-hollow}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

case $N in '' | *[!0-9]*) echo "N must be a number, not $N" >&2; exit 2 ;; esac
[ -r "$KUBECONFIG_FILE" ] || { echo "$2: cannot read the kubeconfig" >&2; exit 2; }

echo "building wasmlet, wasmlet-cri-sim and the plugins (release)…" >&2
(cd "$ROOT" && cargo build --release -q -p wasmlet -p wasmlet-cri-sim)
(cd "$ROOT/plugins" && cargo build --release -q --target wasm32-wasip2)
BIN=$ROOT/target/release
export WASMLET_PLUGIN_DIR=$ROOT/plugins/target/wasm32-wasip2/release

PIDS=""
stop() {
    trap - INT TERM EXIT
    echo "stopping $N hollow nodes…" >&2
    # shellcheck disable=SC2086
    [ -z "$PIDS" ] || kill $PIDS 2>/dev/null || true
    wait 2>/dev/null || true
}
trap stop INT TERM EXIT

mkdir -p "$DIR"
i=1
while [ "$i" -le "$N" ]; do
    name=$PREFIX-$i
    d=$DIR/$name
    mkdir -p "$d/manifests"
    rm -f "$d/cri.sock"
    "$BIN/wasmlet-cri-sim" --socket "$d/cri.sock" >"$d/cri-sim.log" 2>&1 &
    PIDS="$PIDS $!"
    cat >"$d/config.yaml" <<CONFIG
nodeName: $name
containerRuntimeEndpoint: unix://$d/cri.sock
staticPodPath: $d/manifests
rootDir: $d/root
healthzPort: 0
readOnlyPort: 0
port: 0
cgroupsPerQOS: false
nodeLabels: {wasmlet.io/hollow: "true"}
CONFIG
    "$BIN/wasmlet" run --config "$d/config.yaml" --kubeconfig "$KUBECONFIG_FILE" >"$d/agent.log" 2>&1 &
    PIDS="$PIDS $!"
    i=$((i + 1))
done
echo "$N hollow nodes running ($PREFIX-1 … $PREFIX-$N); logs under $DIR; Ctrl-C stops them" >&2
wait
