#!/usr/bin/env bash
# A real containerd for wasmlet, owned by the project and kept under one state directory.
#
#   scripts/containerd.sh up     [STATE_DIR]   install if needed, start, import images, print the socket
#   scripts/containerd.sh down   [STATE_DIR]   remove every pod through CRI, stop containerd, clean up
#   scripts/containerd.sh status [STATE_DIR]   say whether it runs and where its socket is
#   scripts/containerd.sh purge  [STATE_DIR]   down, then delete the state directory
#
# STATE_DIR defaults to $WASMLET_CONTAINERD_DIR or /var/lib/wasmlet/containerd. The CNI
# bridge and pod CIDR are wasmlet0 and 10.88.0.0/16 unless WASMLET_CNI_BRIDGE and
# WASMLET_POD_CIDR say otherwise (give a second instance on one machine its own).
# Everything containerd writes lives under STATE_DIR (root, state, socket, CNI config,
# IPAM data, log), except the shim sockets containerd 1.6 always puts in /run/containerd/s.
#
# Facts this relies on are in the project's notes on containerd: Debian 12 packages,
# `restrict_oom_score_adj = true` (the machine lacks CAP_SYS_RESOURCE), images imported
# from local OCI tarballs (no registry), one CNI conflist without loopback.
set -euo pipefail

PROG=containerd.sh
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
PACKAGES=(containerd runc containernetworking-plugins busybox-static iproute2 iptables)
PAUSE_IMAGE=localhost/pause:3.9
BUSYBOX_IMAGE=localhost/busybox:latest
BRIDGE=${WASMLET_CNI_BRIDGE:-wasmlet0}
POD_CIDR=${WASMLET_POD_CIDR:-10.88.0.0/16}

die() { echo "$PROG: $*" >&2; exit 1; }
say() { echo "$PROG: $*" >&2; }

cmd=${1:-}
STATE=${2:-${WASMLET_CONTAINERD_DIR:-/var/lib/wasmlet/containerd}}
case "$STATE" in /*) ;; *) STATE="$PWD/$STATE" ;; esac
SOCK="$STATE/containerd.sock"
PIDFILE="$STATE/containerd.pid"
LOG="$STATE/containerd.log"

need_root() {
    [ "$(id -u)" = 0 ] || die "must run as root (containerd, runc and CNI need it); try: sudo $0 $cmd"
}

install_packages() {
    local missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null || die "packages missing (${missing[*]}) and apt-get is not available"
    say "installing ${missing[*]}"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
        >"$STATE/apt.log" 2>&1; then
        apt-get update -qq >>"$STATE/apt.log" 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
            >>"$STATE/apt.log" 2>&1 \
            || die "cannot install ${missing[*]}; apt-get said:
$(tail -n 5 "$STATE/apt.log")"
    fi
}

running() {
    [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

ctr_() { ctr --address "$SOCK" --namespace k8s.io "$@"; }

cri_ready() {
    ctr --address "$SOCK" plugins ls 2>/dev/null | grep -Eq '^io\.containerd\.grpc\.v1[[:space:]]+cri[[:space:]].*[[:space:]]ok[[:space:]]*$'
}

write_config() {
    mkdir -p "$STATE/cni/net.d" "$STATE/cni/ipam" "$STATE/images" "$STATE/pods"
    cat >"$STATE/config.toml" <<EOF
# Written by scripts/containerd.sh; rewritten on every 'up'.
version = 2
root = "$STATE/root"
state = "$STATE/state"
oom_score = 0

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
    max_conf_num = 1
EOF
    # One network: a bridge with host-local IPAM (its data under STATE) and portmap
    # for hostPort. No loopback entry: containerd brings lo up itself.
    cat >"$STATE/cni/net.d/10-wasmlet.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "wasmlet",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$STATE/cni/ipam",
        "ranges": [[{ "subnet": "$POD_CIDR" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF
}

build_images() {
    local py
    py=$(command -v python3) || die "python3 is needed to build the local images"
    [ -f "$STATE/images/pause.tar" ] || "$py" "$REPO/scripts/oci-image.py" "$PAUSE_IMAGE" "$STATE/images/pause.tar" \
        --cmd '["/bin/sh","-c","trap \"exit 0\" TERM INT; while true; do sleep 3600 & wait $!; done"]' >/dev/null
    [ -f "$STATE/images/busybox.tar" ] || "$py" "$REPO/scripts/oci-image.py" "$BUSYBOX_IMAGE" "$STATE/images/busybox.tar" \
        --cmd '["sh"]' >/dev/null
}

import_images() {
    local have
    have=$(ctr_ images ls -q 2>/dev/null || true)
    for pair in "$PAUSE_IMAGE:pause" "$BUSYBOX_IMAGE:busybox"; do
        local name=${pair%:*} file=${pair##*:}
        if ! grep -qx "$name" <<<"$have"; then
            ctr_ images import --snapshotter overlayfs "$STATE/images/$file.tar" >/dev/null \
                || die "cannot import $name from $STATE/images/$file.tar (see $LOG)"
        fi
    done
}

# The IPv4 network CIDR $1 as "first last" integers.
cidr_range() {
    local ip=${1%/*} bits=${1#*/} a b c d
    [ "$bits" = "$1" ] && bits=32
    IFS=. read -r a b c d <<<"$ip"
    local n=$(( (a << 24) | (b << 16) | (c << 8) | d ))
    local size=$(( 1 << (32 - bits) ))
    local first=$(( n & ~(size - 1) & 0xffffffff ))
    echo "$first $(( first + size - 1 ))"
}

# Stops when another interface already routes part of the pod CIDR (podman's default
# network uses 10.88.0.0/16): pods would get addresses nothing can reach, and liveness
# probes would kill them in a loop with "No route to host".
check_pod_cidr() {
    local first last route dest dev r_first r_last
    read -r first last <<<"$(cidr_range "$POD_CIDR")"
    while read -r route; do
        dest=${route%% *}
        [ "$dest" = default ] && continue
        dev=$(sed -n 's/.* dev \([^ ]*\).*/\1/p' <<<"$route")
        [ "$dev" = "$BRIDGE" ] && continue
        case "$dest" in *[!0-9./]*) continue ;; esac
        read -r r_first r_last <<<"$(cidr_range "$dest")"
        if [ "$r_first" -le "$last" ] && [ "$first" -le "$r_last" ]; then
            die "the pod network $POD_CIDR overlaps $dest, already routed through $dev ($route): pods on $BRIDGE would be unreachable. Remove that network, or give wasmlet another range and bridge: WASMLET_POD_CIDR=10.89.0.0/16 WASMLET_CNI_BRIDGE=wasmlet1"
        fi
    done < <(ip -4 -o route show table main 2>/dev/null)
}

up() {
    need_root
    mkdir -p "$STATE"
    install_packages
    check_pod_cidr
    if running && cri_ready; then
        import_images
        echo "unix://$SOCK"
        return 0
    fi
    write_config
    build_images
    rm -f "$SOCK" "$SOCK.ttrpc"
    # Detach from this shell: containerd outlives the script (there is no systemd here).
    setsid containerd --config "$STATE/config.toml" >"$LOG" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    local i
    for i in $(seq 1 300); do
        cri_ready && break
        running || die "containerd exited at start; the end of $LOG:
$(tail -n 15 "$LOG")"
        sleep 0.1
    done
    cri_ready || die "containerd did not serve CRI within 30 s; see $LOG"
    import_images
    echo "unix://$SOCK"
}

wasmlet_bin() {
    local b
    for b in "${WASMLET_BIN:-}" "$REPO/target/debug/wasmlet" "$REPO/target/release/wasmlet"; do
        [ -n "$b" ] && [ -x "$b" ] && { echo "$b"; return 0; }
    done
    return 1
}

remove_pods() {
    local bin
    if bin=$(wasmlet_bin) && "$bin" cri --endpoint "unix://$SOCK" reset >&2; then
        return 0
    fi
    # Without the wasmlet binary (or if it failed), ctr can still kill and delete the
    # containers; CNI teardown then happens when containerd removes the sandboxes' netns.
    say "removing pods with ctr (no usable wasmlet binary for a CRI teardown)"
    local id
    for id in $(ctr_ tasks ls -q 2>/dev/null); do
        ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    sleep 0.5
    for id in $(ctr_ tasks ls -q 2>/dev/null); do
        ctr_ tasks delete -f "$id" >/dev/null 2>&1 || true
    done
    for id in $(ctr_ containers ls -q 2>/dev/null); do
        ctr_ containers delete "$id" >/dev/null 2>&1 || true
    done
}

down() {
    need_root
    [ -d "$STATE" ] || { say "nothing to stop: $STATE does not exist"; return 0; }
    if running; then
        cri_ready && remove_pods
        local pid
        pid=$(cat "$PIDFILE")
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$PIDFILE"
    # Shims of this containerd that outlived it (killed containerd, crashed test run).
    local shims
    shims=$(pgrep -f "containerd-shim-runc-v2 .*-address $SOCK( |$)" || true)
    if [ -n "$shims" ]; then
        say "killing leftover shims: $(echo $shims)"
        # shellcheck disable=SC2086
        kill -KILL $shims 2>/dev/null || true
    fi
    # Mounts under the state dir (rootfs overlays, sandbox shm), deepest first.
    awk -v s="$STATE/" 'index($2, s) == 1 { print $2 }' /proc/self/mounts | sort -r | while read -r m; do
        umount -l "$m" 2>/dev/null || true
    done
    # The bridge CNI created for our pods: nothing uses it once the pods are gone.
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link delete "$BRIDGE" 2>/dev/null || true
    fi
    rm -f "$SOCK" "$SOCK.ttrpc"
    say "stopped; state kept in $STATE"
}

status() {
    if running && cri_ready; then
        echo "running: unix://$SOCK (pid $(cat "$PIDFILE"))"
    else
        echo "not running ($STATE)"
        return 1
    fi
}

case "$cmd" in
    up) up ;;
    down) down ;;
    status) status ;;
    purge) down; rm -rf "$STATE"; say "removed $STATE" ;;
    *) echo "usage: $0 up|down|status|purge [STATE_DIR]" >&2; exit 2 ;;
esac
