#!/bin/bash
# Runs inside a vm-lab VM (Debian 12, systemd, cgroup v2, containerd 1.6): the VM side
# of bench/cgroupv2/vm_compare.py. Everything it needs was copied to its own directory.
#
#   guest.sh prepare                 images, pause 3.10 as the sandbox image, a bridge CNI
#   guest.sh start AGENT DRIVER      containerd for DRIVER (systemd|cgroupfs), then AGENT
#                                    (kubelet|wasmlet) as the transient unit cgv2-agent
#   guest.sh stop                    the agent stopped, every pod and the pod tree removed
#   guest.sh dump                    the pod tree's files, one "path<TAB>file<TAB>value" a line
#   guest.sh units                   the slices' systemd properties (systemd driver)
#   guest.sh usage                   each pod cgroup's CPU time: "path<TAB>usage_usec"
#   guest.sh cpu-pods clear|on|off   the other pods taken away (room for the spinning ones);
#                                    the spinning pods (pods-cpu/) added or taken away
#   guest.sh package AGENT DRIVER    the .deb installed, kubelet.service enabled with this
#                                    configuration (AGENT kubelet: the upstream binary in the
#                                    package's unit), the pods in place, started
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CG=/sys/fs/cgroup
SOCK=unix:///run/containerd/containerd.sock
CONFIG=/etc/cgv2/config.yaml

log() { echo "[guest $(date +%T)] $*" >&2; }

prepare() {
  ctr -n k8s.io images import "$HERE/images.oci.tar" >/dev/null
  sed -i 's|sandbox_image = .*|sandbox_image = "registry.k8s.io/pause:3.10"|' /etc/containerd/config.toml
  mkdir -p /etc/cni/net.d /etc/cgv2/manifests
  cat >/etc/cni/net.d/10-cgv2.conflist <<'JSON'
{"cniVersion": "1.0.0", "name": "cgv2", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
  install -m 0755 "$HERE/kubelet" /usr/local/bin/kubelet-upstream
  install -m 0755 "$HERE/wasmlet" /usr/local/bin/wasmlet
  # The plugins the package ships, where the package puts them.
  mkdir -p /usr/lib/wasmlet/plugins
  cp "$HERE"/plugins/*.wasm /usr/lib/wasmlet/plugins/
  log "prepared: $(ctr -n k8s.io images ls -q | grep -c .) images"
}

containerd_for() {
  local want=false
  [[ $1 == systemd ]] && want=true
  sed -i "s|SystemdCgroup = .*|SystemdCgroup = $want|" /etc/containerd/config.toml
  systemctl restart containerd
  for _ in $(seq 120); do
    ctr -n k8s.io version >/dev/null 2>&1 && return 0
    sleep 1
  done
  echo "containerd did not come back within 120 s" >&2; return 1
}

write_config() {
  mkdir -p "$(dirname "$CONFIG")"
  cat >"$CONFIG" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: $1
containerRuntimeEndpoint: $SOCK
staticPodPath: /etc/cgv2/manifests
readOnlyPort: 10255
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
failSwapOn: false
podPidsLimit: 1024
systemReserved: {cpu: 100m, memory: 256Mi}
enforceNodeAllocatable: [pods]
evictionHard: {memory.available: 100Mi}
fileCheckFrequency: 5s
YAML
}

start() {
  local agent=$1 driver=$2 bin
  case $agent in
    kubelet) bin=/usr/local/bin/kubelet-upstream ;;
    wasmlet) bin="/usr/local/bin/wasmlet run" ;;
    *) echo "unknown agent $agent" >&2; exit 2 ;;
  esac
  containerd_for "$driver"
  write_config "$driver"
  cp "$HERE"/pods/*.yaml /etc/cgv2/manifests/
  systemd-run --unit=cgv2-agent --collect --property=KillMode=process \
    $bin --config="$CONFIG" --hostname-override=node-1 --v=2 >/dev/null
  log "started $agent ($driver)"
}

stop() {
  unpackage
  systemctl stop cgv2-agent 2>/dev/null || true
  systemctl reset-failed cgv2-agent 2>/dev/null || true
  rm -f /etc/cgv2/manifests/*
  /usr/local/bin/wasmlet cri reset >/dev/null 2>&1 || true
  # The tree itself, for the next agent to make its own: the slices through systemd,
  # the cgroupfs directories deepest first.
  systemctl stop kubepods.slice 2>/dev/null || true
  if [[ -d $CG/kubepods ]]; then
    find "$CG/kubepods" -depth -type d -exec rmdir {} + 2>/dev/null || true
  fi
  rm -rf /var/lib/kubelet/pods /var/lib/kubelet/cpu_manager_state /var/lib/kubelet/memory_manager_state \
    /var/lib/kubelet/wasmlet /var/log/pods/* /var/log/containers/*
  log "stopped; left: $(ls -d $CG/kubepods* 2>/dev/null | tr '\n' ' ')"
}

dump() {
  local files="cgroup.controllers cgroup.subtree_control cpu.weight cpu.max cpu.idle
    memory.max memory.min memory.low memory.high memory.swap.max memory.oom.group
    pids.max io.weight cpuset.cpus hugetlb.2MB.max hugetlb.1GB.max hugetlb.2MB.rsvd.max
    hugetlb.1GB.rsvd.max"
  printf '/\tcgroup.subtree_control\t%s\n' "$(cat $CG/cgroup.subtree_control)"
  find "$CG" -mindepth 1 -type d \( -path "$CG/kubepods*" \) | sort | while read -r d; do
    for f in $files; do
      [[ -f $d/$f ]] && printf '%s\t%s\t%s\n' "${d#$CG}" "$f" "$(tr '\n' ' ' <"$d/$f" | sed 's/ $//')"
    done
  done
}

units() {
  systemctl list-units --all --plain --no-legend 'kubepods*' | awk '{print $1}' | while read -r u; do
    printf '%s\t%s\n' "$u" "$(systemctl show "$u" -p CPUWeight -p CPUQuotaPerSecUSec -p MemoryMax \
      -p TasksMax -p Delegate -p DefaultDependencies | tr '\n' ' ')"
  done
}

usage() {
  find "$CG" -mindepth 2 -type d \( -name 'pod*' -o -name '*-pod*.slice' \) -path "$CG/kubepods*" |
    while read -r d; do
      printf '%s\t%s\n' "${d#$CG}" "$(awk '$1 == "usage_usec" {print $2}' "$d/cpu.stat")"
    done
}

cpu_pods() {
  case $1 in
    on) cp "$HERE"/pods-cpu/*.yaml /etc/cgv2/manifests/ ;;
    clear) for f in "$HERE"/pods/*.yaml; do rm -f "/etc/cgv2/manifests/$(basename "$f")"; done ;;
    off) for f in "$HERE"/pods-cpu/*.yaml; do rm -f "/etc/cgv2/manifests/$(basename "$f")"; done ;;
  esac
}

package() {
  local agent=$1 driver=$2 exec=/usr/bin/kubelet
  [[ $agent == kubelet ]] && exec=/usr/local/bin/kubelet-upstream
  apt-get install -y -q "$HERE/wasmlet.deb" >/dev/null
  containerd_for "$driver"
  write_config "$driver"
  cp "$HERE"/pods/*.yaml /etc/cgv2/manifests/
  mkdir -p /etc/systemd/system/kubelet.service.d
  cat >/etc/systemd/system/kubelet.service.d/20-cgv2.conf <<UNIT
[Service]
ExecStart=
ExecStart=$exec --config=$CONFIG --hostname-override=node-1 --v=2
UNIT
  systemctl daemon-reload
  systemctl enable --now kubelet >/dev/null 2>&1
  log "kubelet.service runs $exec ($driver)"
}

unpackage() {
  systemctl disable --now kubelet >/dev/null 2>&1 || true
  rm -f /etc/systemd/system/kubelet.service.d/20-cgv2.conf
  systemctl daemon-reload
}

cmd=${1:-}; shift || true
case $cmd in
  prepare|start|stop|dump|units|usage|package|unpackage) "$cmd" "$@" ;;
  cpu-pods) cpu_pods "$@" ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
