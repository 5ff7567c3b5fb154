#!/bin/bash
# The systemd cgroup driver on a real systemd 252 (../shared/systemd-ns: PID 1 of its own
# namespaces, cgroup v1 as systemd lays it out, containerd with SystemdCgroup = true): a
# node agent — wasmlet or the upstream kubelet, the same configuration for both — runs
# three static pods (Guaranteed, Burstable, BestEffort) under `cgroupDriver: systemd`, and
# eight checks are printed ok or FAIL:
#
#   1 healthz          the agent starts and answers 127.0.0.1:10248/healthz
#   2 qos slices       kubepods.slice and its two QoS slices are active units
#   3 pods running     the three pods' containers run
#   4 pod slices       each pod's slice and its v1 files as the kubelet writes them
#                      (cpu.shares, cfs quota, memory limit, pids.max)
#   5 tiers            the QoS slices' files (burstable: its pods' requests together)
#   6 restart          `systemctl restart` of the agent: the same containers, none restarted
#   7 bus down         the system bus stopped, the agent restarted: systemd reached on its
#                      private socket, the same containers, a fourth pod's slice made
#   8 never exits      the unit was never restarted by systemd (NRestarts=0), and every
#                      start said once which controller hierarchies it skips (wasmlet)
#
# The pods' and tiers' cgroup files go to OUT/values.txt: `diff` a kubelet run's against a
# wasmlet run's. A pure check of the node, not CI (CI has no systemd to boot).
#
# Usage: scripts/testbed/systemd-driver-check.sh wasmlet|kubelet OUT
# Env:   WASMLET (target/release/wasmlet), WASMLET_PLUGIN_DIR (this tree's built plugins),
#        KUBELET ($K8S_TESTBED/bin/kubelet), K8S_TESTBED (/tmp/k8s-testbed-1.33),
#        NS_BASE (/tmp/sdcheck-ns), NS_CGNAME (sdcheck-ns), SYSTEMD_NS (../shared/systemd-ns).
set -u
AGENT=${1:?wasmlet|kubelet}
OUT=$(realpath -m "${2:?OUT}")
HERE=$(cd "$(dirname "$0")/../.." && pwd)
export K8S_TESTBED=${K8S_TESTBED:-/tmp/k8s-testbed-1.33}
export NS_BASE=${NS_BASE:-/tmp/sdcheck-ns} NS_CGNAME=${NS_CGNAME:-sdcheck-ns}
NS=${SYSTEMD_NS:-$HERE/../shared/systemd-ns}/ns.sh
# Absolute: the unit runs from / inside the namespaces.
WASMLET=$(realpath -m "${WASMLET:-$HERE/target/release/wasmlet}")
PLUGINS=$(realpath -m "${WASMLET_PLUGIN_DIR:-$HERE/plugins/target/wasm32-wasip2/release}")
KUBELET=$(realpath -m "${KUBELET:-$K8S_TESTBED/bin/kubelet}")
CFG=$NS_BASE/check
LOG=$NS_BASE/logs/agent.log
mkdir -p "$OUT"
SUM=$OUT/summary.txt
: >"$SUM"
fails=0
nsx() { "$NS" exec "$@"; }
res() { # res N NAME ok|FAIL DETAIL
  printf '%s %-14s %-4s %s\n' "$1" "$2" "$3" "$4" | tee -a "$SUM"
  [ "$3" = ok ] || fails=$((fails + 1))
}
wait_for() { # wait_for SECONDS CMD...: until CMD succeeds
  local end=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do [ $SECONDS -lt $end ] || return 1; sleep 1; done
}
healthy() { [ "$(nsx curl -s -m 2 127.0.0.1:10248/healthz)" = ok ]; }
# name=containerID:restartCount of every container of the node's pods, sorted
containers() {
  nsx curl -s -m 5 127.0.0.1:10255/pods | python3 -c '
import json, sys
for p in json.load(sys.stdin).get("items") or []:
    for c in p.get("status", {}).get("containerStatuses", []) or []:
        if "running" in (c.get("state") or {}):
            print("%s/%s=%s:%s" % (p["metadata"]["name"], c["name"], c.get("containerID", ""), c.get("restartCount", 0)))
' | sort
}
running_count() { [ "$(containers | wc -l)" -ge "$1" ]; }
# The slice directory of the pod named $1 (by its UID as the agent reports it).
pod_slice() {
  local uid tier
  uid=$(nsx curl -s -m 5 127.0.0.1:10255/pods | python3 -c '
import json, sys
for p in json.load(sys.stdin).get("items") or []:
    if p["metadata"]["name"].startswith(sys.argv[1] + "-"):
        print(p["metadata"]["uid"].replace("-", "_"), (p.get("status") or {}).get("qosClass", ""))
' "$1")
  set -- $uid
  case ${2:-} in
    Guaranteed) echo "kubepods.slice/kubepods-pod$1.slice" ;;
    Burstable) echo "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod$1.slice" ;;
    BestEffort) echo "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod$1.slice" ;;
  esac
}
# A v1 cgroup file's value (an unlimited memory limit reads as the page-rounded 2^63-1: max).
cg() { nsx cat "/sys/fs/cgroup/$1/$2" 2>/dev/null | sed 's/^9223372036854771712$/max/' | grep . || echo absent; }
start_agent() {
  local cmd
  case $AGENT in
    wasmlet) cmd="-E WASMLET_PLUGIN_DIR=$PLUGINS $WASMLET run" ;;
    kubelet) cmd="$KUBELET" ;;
  esac
  # shellcheck disable=SC2086
  nsx systemd-run --unit=agent -p Restart=always -p RestartSec=2 \
    -p StandardOutput=append:"$LOG" -p StandardError=inherit $cmd \
    --config "$CFG/config.yaml" --root-dir "$CFG/root" --hostname-override sdcheck \
    >/dev/null
}
static_pod() { # static_pod NAME RESOURCES
  cat >"$CFG/manifests/$1.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  containers:
  - name: c
    image: localhost/busybox:latest
    imagePullPolicy: Never
    command: [sh, -c, "trap 'exit 0' TERM; while true; do sleep 1; done"]
    resources: $2
EOF
}

# The node and the agent.
"$NS" down >/dev/null 2>&1
case $NS_BASE in /tmp/?*) rm -rf "$NS_BASE" ;; esac # no containers of an earlier run in containerd's store
"$NS" up >"$OUT/ns-up.log" 2>&1 || { echo "ns.sh up failed: $OUT/ns-up.log" >&2; exit 2; }
rm -rf "$CFG" "$LOG"
mkdir -p "$CFG/manifests" "$CFG/root"
cat >"$CFG/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
containerRuntimeEndpoint: unix://$NS_BASE/containerd/containerd.sock
staticPodPath: $CFG/manifests
readOnlyPort: 10255
podPidsLimit: 1024
failSwapOn: false
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
evictionHard: {memory.available: 1Mi, nodefs.available: 1%, imagefs.available: 1%}
EOF
static_pod g "{limits: {cpu: 200m, memory: 64Mi}}"
static_pod b "{requests: {cpu: 100m}}"
static_pod e "{}"
start_agent

# 1-3: it starts, makes the tree, runs the pods.
if wait_for 90 healthy; then res 1 healthz ok "after ${SECONDS}s"; else res 1 healthz FAIL "no healthz in 90 s (log: $LOG)"; fi
slices() { for u in kubepods.slice kubepods-burstable.slice kubepods-besteffort.slice; do nsx systemctl is-active "$u"; done | paste -sd' '; }
slices_active() { [ "$(slices)" = "active active active" ]; }
wait_for 60 slices_active
active=$(slices)
[ "$active" = "active active active" ] && res 2 "qos slices" ok "$active" || res 2 "qos slices" FAIL "$active"
if wait_for 120 running_count 3; then res 3 "pods running" ok "$(containers | cut -d= -f1 | paste -sd' ')"; else res 3 "pods running" FAIL "$(containers | wc -l) of 3"; fi

# 4-5: the values, as the kubelet writes them.
{
  for f in cpu/cpu.shares cpu/cpu.cfs_quota_us memory/memory.limit_in_bytes pids/pids.max; do
    for s in kubepods.slice kubepods.slice/kubepods-burstable.slice kubepods.slice/kubepods-besteffort.slice; do
      echo "$s ${f#*/} $(cg "${f%%/*}/$s" "${f#*/}")"
    done
    for p in g b e; do echo "pod-$p ${f#*/} $(cg "${f%%/*}/$(pod_slice $p)" "${f#*/}")"; done
  done
} | sort >"$OUT/values.txt"
val() { awk -v k="$1" -v f="$2" '$1 == k && $2 == f { print $3 }' "$OUT/values.txt"; }
want="g:204:20000:67108864:1024 b:102:-1:max:1024 e:2:-1:max:1024"
got=$(for p in g b e; do echo -n "$p:$(val pod-$p cpu.shares):$(val pod-$p cpu.cfs_quota_us):$(val pod-$p memory.limit_in_bytes):$(val pod-$p pids.max) "; done)
[ "${got% }" = "$want" ] && res 4 "pod slices" ok "$want" || res 4 "pod slices" FAIL "$got (want $want)"
tiers="$(val kubepods.slice/kubepods-burstable.slice cpu.shares) $(val kubepods.slice/kubepods-besteffort.slice cpu.shares)"
[ "$tiers" = "102 2" ] && res 5 tiers ok "burstable 102, besteffort 2 cpu.shares; kubepods $(val kubepods.slice cpu.shares)" || res 5 tiers FAIL "$tiers (want 102 2)"

# 6: a restart keeps every container.
before=$(containers)
nsx systemctl restart agent
same() { [ "$(containers)" = "$before" ]; }
# The agent has its pods again: every container of before, and for 10 s no other.
if wait_for 90 healthy && wait_for 60 same && sleep 10 && same; then res 6 restart ok "the same $(echo "$before" | wc -l) containers, no restart"; else res 6 restart FAIL "$(diff <(echo "$before") <(containers) | tr '\n' ' ')"; fi

# 7: the system bus down: systemd on its private socket.
nsx systemctl stop dbus.socket dbus.service
nsx systemctl restart agent
static_pod d "{requests: {cpu: 50m}}"
if wait_for 90 healthy && wait_for 120 running_count 4 && [ "$(containers | grep -v '^d-')" = "$before" ] \
  && [ "$(cg "cpu/$(pod_slice d)" cpu.shares)" = 51 ]; then
  res 7 "bus down" ok "the same containers; pod d's slice cpu.shares 51"
else
  res 7 "bus down" FAIL "$(containers | wc -l) running; d: $(cg "cpu/$(pod_slice d)" cpu.shares)"
fi
nsx systemctl start dbus.socket dbus.service

# 8: never exited; the skipped hierarchies said once a start (3 starts).
restarts=$(nsx systemctl show agent -p NRestarts --value)
skip_lines=$(grep -c 'cgroup controller .* skipped' "$LOG")
case $AGENT in
  wasmlet) want_skip=3 ;;
  kubelet) want_skip=0 ;;
esac
if [ "$restarts" = 0 ] && { [ "$AGENT" = kubelet ] || [ "$((skip_lines % 3))" = 0 -a "$skip_lines" -ge "$want_skip" ]; }; then
  res 8 "never exits" ok "NRestarts=0; skip lines: $skip_lines"
else
  res 8 "never exits" FAIL "NRestarts=$restarts; skip lines: $skip_lines"
fi
grep 'cgroup controller .* skipped' "$LOG" | head -2 >>"$SUM"

cp "$LOG" "$OUT/agent.log"
nsx systemctl stop agent >/dev/null 2>&1
"$NS" down >"$OUT/ns-down.log" 2>&1
echo "$((8 - fails)) of 8 ok ($AGENT)" | tee -a "$SUM"
[ "$fails" = 0 ]
