#!/usr/bin/env bash
# A real OCI registry (Debian's docker-registry, the CNCF distribution registry) with
# htpasswd auth on loopback, for the cluster-plugin tests and by hand.
#
#   scripts/registry.sh up   [STATE_DIR]   install if needed, start, print REGISTRY USER PASSWORD
#   scripts/registry.sh down [STATE_DIR]   stop it (its blobs stay in STATE_DIR)
#
# STATE_DIR defaults to $WASMLET_REGISTRY_DIR or /var/lib/wasmlet/test-registry; the port
# is $WASMLET_REGISTRY_PORT or 5055. The user is `wasmlet`; its password is made once
# and kept in STATE_DIR/password. Plain HTTP: push with `wasmlet plugin push --insecure`.
# With WASMLET_REGISTRY_ANONYMOUS=1 it asks for no credentials (prints REGISTRY - -;
# default state /var/lib/wasmlet/test-registry-anonymous, port 5056): for the scale bench,
# where a thousand pulls' bcrypt checks would make this machine's registry, not the
# nodes, what is measured.
set -euo pipefail

PROG=registry.sh
PACKAGES=(docker-registry apache2-utils curl)
die() { echo "$PROG: $*" >&2; exit 1; }

cmd=${1:-}
ANONYMOUS=${WASMLET_REGISTRY_ANONYMOUS:-}
if [ -n "$ANONYMOUS" ]; then
    STATE=${2:-${WASMLET_REGISTRY_DIR:-/var/lib/wasmlet/test-registry-anonymous}}
    PORT=${WASMLET_REGISTRY_PORT:-5056}
else
    STATE=${2:-${WASMLET_REGISTRY_DIR:-/var/lib/wasmlet/test-registry}}
    PORT=${WASMLET_REGISTRY_PORT:-5055}
fi
case "$STATE" in /*) ;; *) STATE="$PWD/$STATE" ;; esac
PIDFILE="$STATE/registry.pid"
ADDR="127.0.0.1:$PORT"

install_packages() {
    local missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null || die "packages missing (${missing[*]}) and apt-get is not available"
    echo "$PROG: installing ${missing[*]}" >&2
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
        >"$STATE/apt.log" 2>&1; then
        apt-get update -qq >>"$STATE/apt.log" 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
            >>"$STATE/apt.log" 2>&1 || die "cannot install ${missing[*]}; apt-get said:
$(tail -n 5 "$STATE/apt.log")"
    fi
}

running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

up() {
    mkdir -p "$STATE/data"
    install_packages
    [ -s "$STATE/password" ] || head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$STATE/password"
    local password
    password=$(cat "$STATE/password")
    htpasswd -Bbc "$STATE/htpasswd" wasmlet "$password" >/dev/null 2>&1
    cat >"$STATE/config.yml" <<CONFIG
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $STATE/data
  delete:
    enabled: true
http:
  addr: $ADDR
CONFIG
    [ -n "$ANONYMOUS" ] || cat >>"$STATE/config.yml" <<CONFIG
auth:
  htpasswd:
    realm: wasmlet-test
    path: $STATE/htpasswd
CONFIG
    if ! running; then
        if ss -ltn "sport = :$PORT" | grep -q LISTEN; then
            die "port $PORT is taken by another program; set WASMLET_REGISTRY_PORT"
        fi
        nohup docker-registry serve "$STATE/config.yml" >"$STATE/registry.log" 2>&1 &
        echo $! >"$PIDFILE"
    fi
    for _ in $(seq 1 100); do
        # Up when /v2/ asks for credentials (answers, without them).
        case "$ANONYMOUS/$(curl -s -o /dev/null -w '%{http_code}' "http://$ADDR/v2/")" in
            /401) echo "$ADDR wasmlet $password"; return 0 ;;
            ?*/200) echo "$ADDR - -"; return 0 ;;
        esac
        running || die "docker-registry exited; its log says:
$(tail -n 5 "$STATE/registry.log")"
        sleep 0.1
    done
    die "docker-registry did not answer on $ADDR within 10s"
}

down() {
    if running; then
        kill "$(cat "$PIDFILE")" 2>/dev/null || true
    fi
    rm -f "$PIDFILE"
}

case "$cmd" in
    up) up ;;
    down) down ;;
    *) die "usage: $0 up|down [STATE_DIR]" ;;
esac
