#!/bin/bash
# A new node's first start: process start → GET /healthz answers ok, on a fresh rootDir
# each round (no compiled-component cache, no state), against the test containerd:
#   - wasmlet with the shipped plugins precompiled beside them (the package's layout:
#     <plugin dir>/compiled/, made by `wasmlet plugin precompile` as `cargo xtask deb` does)
#   - wasmlet without them (every shipped plugin compiled on the first start)
#   - the upstream kubelet, when KUBELET_BIN names one (standalone, the same config)
#
#   scripts/containerd.sh up /var/lib/wasmlet/test-containerd
#   cargo build --release -p wasmlet && (cd plugins && cargo build --release)
#   bench/first-start.sh [ROUNDS] [ENDPOINT]     (KUBELET_BIN=…/kubelet for the kubelet too)
#
# As root. Prints one line per round and the min / median / max of each.
set -euo pipefail
rounds=${1:-5}
endpoint=${2:-unix:///var/lib/wasmlet/test-containerd/containerd.sock}
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${WASMLET_BIN:-$repo/target/release/wasmlet}
built=$repo/plugins/target/wasm32-wasip2/release
work=$(mktemp -d /tmp/wasmlet-first-start.XXXXXX)
# The kubelet makes its root directory a mount point: undone before anything is removed.
unmount() {
  grep " $work/" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l
}
trap 'unmount; rm -rf "$work"' EXIT
port=10258

# The two plugin directories: the shipped components alone, and with them precompiled.
shipped=(resource_fit node_affinity node_ports taint_toleration sysctls probe_exec
  probe_grpc probe_http_get probe_tcp_socket source_file source_http)
mkdir -p "$work/plain" "$work/packaged"
for p in "${shipped[@]}"; do
  cp "$built/$p.wasm" "$work/plain/"
  cp "$built/$p.wasm" "$work/packaged/"
done
"$bin" plugin --cache-dir "$work/packaged/compiled" precompile "$work"/packaged/*.wasm >/dev/null

config() {
  cat <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: $endpoint
staticPodPath: $1/manifests
healthzPort: $port
readOnlyPort: 0
cgroupDriver: cgroupfs
failSwapOn: false
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
evictionHard: {memory.available: 100Mi}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
}

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# One round: $1 the variant's name, the command after it. Prints milliseconds.
round() {
  local name=$1 node=$work/node
  shift
  unmount
  rm -rf "$node"
  mkdir -p "$node/manifests"
  config "$node" > "$node/config.yaml"
  local t0 pid
  if curl -s -m 1 "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then
    echo "something already answers on 127.0.0.1:$port" >&2
    exit 1
  fi
  t0=$(now_ms)
  "$@" --config "$node/config.yaml" > "$work/$name.log" 2>&1 &
  pid=$!
  until [ "$(curl -s -m 1 "http://127.0.0.1:$port/healthz" 2>/dev/null)" = ok ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "$name exited; its log:" >&2
      tail -20 "$work/$name.log" >&2
      exit 1
    fi
    sleep 0.01
  done
  echo $(( $(now_ms) - t0 ))
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

summary() {
  sort -n | awk '{v[NR]=$1} END {printf "min %d ms, median %d ms, max %d ms\n", v[1], v[int((NR+1)/2)], v[NR]}'
}

wasmlet_run() { exec "$bin" run --root-dir "$work/node/root" "$@"; }
kubelet_run() {
  exec "$KUBELET_BIN" --root-dir "$work/node/root" --cert-dir "$work/node/pki" "$@"
}

declare -A results
variants=(precompiled compiled-on-start)
[ -n "${KUBELET_BIN:-}" ] && variants+=(kubelet)
for i in $(seq 1 "$rounds"); do
  for v in "${variants[@]}"; do
    case $v in
      precompiled) ms=$(WASMLET_PLUGIN_DIR=$work/packaged round "$v" wasmlet_run) ;;
      compiled-on-start) ms=$(WASMLET_PLUGIN_DIR=$work/plain round "$v" wasmlet_run) ;;
      kubelet) ms=$(round "$v" kubelet_run) ;;
    esac
    echo "round $i, $v: $ms ms"
    results[$v]+="$ms "
  done
done
for v in "${variants[@]}"; do
  echo "$v: $(tr ' ' '\n' <<< "${results[$v]}" | grep . | summary)"
done
