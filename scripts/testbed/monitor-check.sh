#!/usr/bin/env bash
# Watch a policy before enforcing it, on the testbed's real control plane: the shipped
# restricted-pods policy as a WasmletPlugin in `mode: Monitor` from a ConfigMap, node-a
# running one plain and one privileged pod, `wasmlet controller` counting.
#
# Usage: scripts/testbed/monitor-check.sh WASMLET OUTDIR
#   WASMLET  the wasmlet binary node-a runs (for `wasmlet controller`)
#   OUTDIR   where the transcript (check.log) and the controller's log go
# Before: ../shared/k8s-testbed-1.33/start.sh --fresh, then
#         AGENT=WASMLET ../shared/k8s-testbed-1.33/node-a.sh start
# Env: K8S_TESTBED (/tmp/k8s-testbed-1.33), POLICY (the component; default the release
#      build of plugins/examples/restricted-pods).
#
# What it checks, each step printed with what kubectl shows:
#  1. applied in Monitor mode: both pods keep running; node-a's audit names team/priv
#     (1 of 2 would be rejected), `kubectl get wasmletplugins` shows WOULD-REJECT 1;
#  2. a new privileged pod runs, with a PolicyWouldReject event; MONITORED becomes 1;
#  3. switched to Enforce: generation 2 audited again, the count gone, and the next
#     privileged pod is refused (Failed, RestrictedPod) while the others keep running.
# It leaves the objects in place (start.sh --fresh clears them).
set -euo pipefail
BIN=$(realpath "$1")
OUT=$(mkdir -p "$2" && realpath "$2")
TB=${K8S_TESTBED:-/tmp/k8s-testbed-1.33}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
POLICY=${POLICY:-$ROOT/plugins/target/wasm32-wasip2/release/restricted_pods.wasm}
export KUBECONFIG=$TB/kubeconfig
k() { "$TB/bin/kubectl" "$@"; }
say() { printf '\n## %s\n' "$*" | tee -a "$OUT/check.log"; }
show() { echo "\$ kubectl $*" >>"$OUT/check.log"; k "$@" 2>&1 | tee -a "$OUT/check.log"; }
# wait_for WHAT SECONDS COMMAND...: until COMMAND succeeds, or fail naming WHAT.
wait_for() {
  local what=$1 limit=$2 start=$SECONDS
  shift 2
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS - start > limit)); then
      echo "FAILED: $what: not within ${limit}s" | tee -a "$OUT/check.log"
      exit 1
    fi
    sleep 1
  done
  echo "ok: $what ($((SECONDS - start)) s)" | tee -a "$OUT/check.log"
}
jp() { k get "$1" "$2" ${3:+-n "$3"} -o jsonpath="$4"; }
is() { [ "$(jp "$@" | head -c 4096)" = "${!#}" ]; }
phase() { jp pod "$1" team '{.status.phase}'; }
pod() { # pod NAME PRIVILEGED
  k apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: team}
spec:
  nodeName: node-a
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: registry.k8s.io/e2e-test-images/busybox:1.36.1-1
    command: [sleep, "3600"]
    securityContext: {privileged: $2}
EOF
}
plugin() { # plugin MODE
  k apply -f - <<EOF
apiVersion: wasmlet.dev/v1alpha1
kind: WasmletPlugin
metadata: {name: restricted-pods}
spec:
  kind: admission
  digest: sha256:$(sha256sum "$POLICY" | cut -d' ' -f1)
  source: {configMap: {name: policies, key: restricted.wasm}}
  admission: {mode: $1}
EOF
}
running() { [ "$(phase "$1")" = Running ]; }
refused() { [ "$(jp pod "$1" team '{.status.phase}/{.status.reason}')" = Failed/RestrictedPod ]; }
export TB
export -f k jp phase running refused

: >"$OUT/check.log"
say "setup: CRDs, RBAC, the node policy, the component, the controller"
for f in wasmletplugin-crd wasmletnode-crd wasmletplugin-rbac wasmletnode-policy; do
  k apply -f "$ROOT/deploy/$f.yaml" >>"$OUT/check.log"
done
k wait --for condition=established crd/wasmletplugins.wasmlet.dev crd/wasmletnodes.wasmlet.dev >>"$OUT/check.log"
k create namespace team --dry-run=client -o yaml | k apply -f - >>"$OUT/check.log"
k -n wasmlet-system create configmap policies --from-file=restricted.wasm="$POLICY" \
  --dry-run=client -o yaml | k apply -f - >>"$OUT/check.log"
"$BIN" controller --kubeconfig "$KUBECONFIG" --count-period 5 >"$OUT/controller.log" 2>&1 &
CONTROLLER=$!
trap 'kill $CONTROLLER 2>/dev/null || true' EXIT

say "two pods run before the policy: team/plain, team/priv (privileged)"
pod plain false >/dev/null
pod priv true >/dev/null
wait_for "both running" 120 bash -c 'running plain && running priv'

say "1. the policy in Monitor mode: the running pods audited, none touched"
plugin Monitor >/dev/null
wait_for "node-a's audit" 60 is wasmletnode node-a "" '{.status.plugins[0].audit.wouldReject}' 1
wait_for "the controller's total" 60 is wasmletplugin restricted-pods "" '{.status.audit.wouldReject}' 1
show get wasmletplugins
show get wasmletnodes
show get wasmletnode node-a -o jsonpath='{.status.plugins[0].audit}{"\n"}'
show get pods -n team
running plain && running priv || { echo "FAILED: a running pod was touched"; exit 1; }
show get events -A --field-selector reason=PodsWouldBeRejected -o custom-columns=REASON:.reason,MESSAGE:.message

say "2. a new privileged pod runs all the same, and is counted"
pod priv-2 true >/dev/null
wait_for "team/priv-2 running" 60 running priv-2
wait_for "the count on node-a" 30 is wasmletnode node-a "" '{.status.plugins[0].wouldReject}' 1
wait_for "the controller's count" 30 is wasmletplugin restricted-pods "" '{.status.wouldReject}' 1
show get events -n team --field-selector reason=PolicyWouldReject -o custom-columns=POD:.involvedObject.name,MESSAGE:.message
show get wasmletplugins

say "3. enforced: generation 2 audited again, the next privileged pod refused"
plugin Enforce >/dev/null
wait_for "generation 2 counted" 60 is wasmletplugin restricted-pods "" '{.status.observedGeneration}/{.status.serving}/{.status.audit.wouldReject}' 2/1/2
show get wasmletplugins
pod priv-3 true >/dev/null
wait_for "team/priv-3 refused" 60 refused priv-3
show get pods -n team -o wide
running plain && running priv && running priv-2 || { echo "FAILED: a running pod was touched"; exit 1; }
echo "all checks passed" | tee -a "$OUT/check.log"
