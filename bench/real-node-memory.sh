#!/bin/bash
# A real node's memory and idle CPU: `wasmlet run` (release build) on the test
# containerd with N static busybox pods, the kubelet server and stats on, every pod
# started from nothing and every shipped plugin compiled (a fresh rootDir). Prints the
# agent's RSS (anonymous and file-backed) and the biggest mappings 45 s after start, its
# CPU over a minute of idling, and its RSS again after that minute.
#
#   scripts/containerd.sh up /var/lib/wasmlet/test-containerd
#   cargo build --release -p wasmlet
#   bench/real-node-memory.sh [PODS] [ENDPOINT]   (WASMLET_BIN: another binary, for A/B)
#
# WASMLET_EXTRA_ADMISSION="A.wasm B.wasm": these policies join the shipped admission
# chain (e.g. the Python and TypeScript restricted-pods of plugins/target/lang/).
#
# As root. The pods are removed at the end (the agent run again with no manifests).
set -euo pipefail
pods=${1:-30}
endpoint=${2:-unix:///var/lib/wasmlet/test-containerd/containerd.sock}
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${WASMLET_BIN:-$repo/target/release/wasmlet}
work=$(mktemp -d /tmp/wasmlet-memory.XXXXXX)
mkdir -p "$work/manifests" "$work/empty"
for i in $(seq 1 "$pods"); do
  cat > "$work/manifests/p$i.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: p$i, namespace: default}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - {name: c, image: localhost/busybox:latest, imagePullPolicy: IfNotPresent, command: [sleep, "3600"]}
EOF
done
# The shipped chain with the extra policies after it, when there are any.
plugins_section() {
  [ -n "${WASMLET_EXTRA_ADMISSION:-}" ] || return 0
  local dir=$repo/plugins/target/wasm32-wasip2/release
  echo "plugins:"
  echo "  admission:"
  for n in resource_fit node_affinity node_ports taint_toleration sysctls; do
    echo "  - {name: ${n//_/-}, file: $dir/$n.wasm}"
  done
  for f in $WASMLET_EXTRA_ADMISSION; do
    echo "  - {name: $(basename "$f" .wasm), file: $f}"
  done
}
config() {
  plugins_section
  cat <<EOF
nodeName: memnode
containerRuntimeEndpoint: $endpoint
staticPodPath: $1
rootDir: $work/root
healthzPort: 10258
readOnlyPort: 0
port: 10259
authorization: {mode: AlwaysAllow}
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
evictionHard: {memory.available: 100Mi}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 100
EOF
}
config "$work/manifests" > "$work/config.yaml"
config "$work/empty" > "$work/config-empty.yaml"

"$bin" run --config "$work/config.yaml" > "$work/agent.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
sleep 45
running=$(curl -sk https://127.0.0.1:10259/pods | grep -o '"phase":"Running"' | wc -l)
curl -sk https://127.0.0.1:10259/stats/summary > /dev/null
echo "pods Running: $running of $pods"
grep -E 'VmRSS|RssAnon|RssFile' "/proc/$pid/status"
echo "biggest mappings (KiB resident):"
awk '/^[0-9a-f]+-[0-9a-f]+ /{n=$6; if(n=="")n="[anon]"} /^Rss:/{r[n]+=$2} END{for(n in r) if(r[n]>500) print "  " r[n], n}' \
  "/proc/$pid/smaps" | sort -rn
t0=$(awk '{print $14+$15}' "/proc/$pid/stat")
sleep 60
t1=$(awk '{print $14+$15}' "/proc/$pid/stat")
ticks=$(getconf CLK_TCK)
echo "idle CPU: $(echo "scale=3; ($t1-$t0)*100/$ticks/60" | bc) % of a core"
# A minute later: the start-up pages of the executable and the idle plugins' code have
# been paged out (60 s after start, and 10 s after a plugin's last call).
echo "after the idle minute (105 s after start):"
grep -E 'VmRSS|RssAnon|RssFile' "/proc/$pid/status"
awk '/^[0-9a-f]+-[0-9a-f]+ /{n=$6; if(n=="")n="[anon]"} /^Rss:/{r[n]+=$2} END{for(n in r) if(r[n]>500) print "  " r[n], n}' \
  "/proc/$pid/smaps" | sort -rn
kill $pid; wait $pid 2>/dev/null || true

# Remove the pods: the same node with no manifests.
"$bin" run --config "$work/config-empty.yaml" > "$work/clean.log" 2>&1 &
pid=$!
for _ in $(seq 1 60); do
  sleep 2
  left=$("$bin" cri --endpoint "$endpoint" pods 2>/dev/null || true)
  grep -q -- '-memnode ' <<< "$left" || break
done
kill $pid; wait $pid 2>/dev/null || true
rm -rf "$work"
