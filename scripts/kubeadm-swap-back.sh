#!/bin/bash
# The way back from wasmlet to the upstream kubelet on a live kubeadm control-plane node:
# on the node `../shared/kubeadm/run.sh wasmlet --keep` (a control plane wasmlet made) or
# `run.sh kubelet --swap --keep` (the kubelet's, taken over by wasmlet's package) leaves
# running, remove the package, install the upstream kubelet as its package does
# (/usr/bin/kubelet + kubelet.service, unmasked and enabled), restart the service, and
# check that the kubelet keeps every running container (none restarted) and that the
# control plane answers. Then stop the namespaces with `ns.sh down`.
#
# Usage: scripts/kubeadm-swap-back.sh
# Env: as run.sh: K8S_TESTBED (/tmp/k8s-testbed), NS_BASE (/tmp/kadm-ns), NS_CGNAME
#      (kadm-ns), KADM_RESULTS (/tmp/kadm-results; results in $KADM_RESULTS/swap-back/),
#      KADM (the harness directory; default ../shared/kubeadm beside the project).
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
KADM=${KADM:-$HERE/../shared/kubeadm}
BASE=${NS_BASE:-/tmp/kadm-ns}
CG=${NS_CGNAME:-kadm-ns}
BIN=${K8S_TESTBED:-/tmp/k8s-testbed}/bin
OUT=${KADM_RESULTS:-/tmp/kadm-results}/swap-back
mkdir -p "$OUT"
SUM=$OUT/summary.txt
: >"$SUM"
nsx() { NS_BASE=$BASE NS_CGNAME=$CG "$KADM/ns.sh" exec "$@"; }
kc() { nsx env KUBECONFIG=/etc/kubernetes/admin.conf /usr/bin/kubectl "$@"; }
res() { printf '%-58s %s\n' "$1" "$2" | tee -a "$SUM"; }
apiup() { [ "$(nsx curl -sk -m 3 https://192.0.2.2:6443/healthz)" = ok ]; }
running() { nsx crictl ps -q | sort | paste -sd,; }

apiup || { echo "no control plane at $BASE: run ../shared/kubeadm/run.sh kubelet --swap --keep first" >&2; exit 1; }
res "agent before" "$(nsx kubelet --version 2>&1)"
before=$(running)
kc get pods -A --no-headers >"$OUT/pods-before.txt" 2>&1
nsx dpkg -r wasmlet >"$OUT/dpkg-remove.log" 2>&1
res "dpkg -r wasmlet" "rc=$?"
nsx sh -ec 'install -m755 "$1/kubelet" /usr/bin/kubelet
  install -m644 "$0/cfg/kubelet.service" /usr/lib/systemd/system/kubelet.service
  systemctl daemon-reload
  # What the kubelet package'"'"'s postinst does too: removing wasmlet'"'"'s package masked the
  # unit (debhelper'"'"'s postrm), the kubelet'"'"'s unmasks it.
  deb-systemd-helper unmask kubelet.service || systemctl unmask kubelet.service
  systemctl enable kubelet.service' "$BASE" "$BIN" >"$OUT/install.log" 2>&1
res "upstream kubelet installed" "rc=$? $(nsx kubelet --version 2>&1)"
start=$SECONDS
nsx systemctl restart kubelet
sleep 30
until apiup; do
  [ $((SECONDS - start)) -ge 180 ] && break
  sleep 1
done
apiup && res "API server healthy after the way back" "ok (+$((SECONDS - start))s)" ||
  res "API server healthy after the way back" "FAILED (not within 180 s)"
after=$(running)
count() { echo "$1" | tr ',' '\n' | grep -c .; }
if [ "$before" = "$after" ]; then
  res "running containers kept (wasmlet's -> kubelet's)" "yes, the same $(count "$before")"
else
  res "running containers kept (wasmlet's -> kubelet's)" "NO: before=$(count "$before") after=$(count "$after")"
fi
kc get pods -A --no-headers >"$OUT/pods-after.txt" 2>&1
res "pods after the way back" "$(awk '{print $2"="$3"/"$4"/r"$5}' "$OUT/pods-after.txt" | paste -sd' ')"
cp "$BASE/logs/kubelet.log" "$OUT/kubelet.log" 2>/dev/null || nsx journalctl -u kubelet --no-pager -n 400 >"$OUT/kubelet.log" 2>&1
echo "results in $OUT"
