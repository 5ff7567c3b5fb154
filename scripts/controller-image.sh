#!/bin/sh
# The image of `wasmlet controller` (deploy/wasmlet-controller.yaml): the release build of
# the wasmlet binary with the shared libraries it links, over busybox, as
# localhost/wasmlet:VERSION — an OCI layout tarball, imported into a containerd when one
# is given.
#
#   scripts/controller-image.sh [OUT.tar] [--import SOCKET]
#
# Build first: cargo build --release -p wasmlet --locked. For a real cluster, push the
# tarball to your registry (skopeo copy oci-archive:OUT.tar docker://REGISTRY/wasmlet:V)
# and set the Deployment's image.
set -eu
cd "$(dirname "$0")/.."
out=${1:-target/wasmlet-image.tar}
[ "${1:-}" = "--import" ] && out=target/wasmlet-image.tar
socket=
while [ $# -gt 0 ]; do
    case "$1" in
        --import) socket=$2; shift 2 ;;
        *) shift ;;
    esac
done
bin=target/release/wasmlet
[ -x "$bin" ] || { echo "controller-image.sh: no $bin; cargo build --release -p wasmlet --locked first" >&2; exit 1; }
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
name="localhost/wasmlet:$version"
set -- --add "$bin=usr/bin/wasmlet"
# The libraries it links, and the loader, at the paths the binary asks for.
for lib in $(ldd "$bin" | awk '/=> \//{print $3} /^\t\/lib/{print $1}'); do
    set -- "$@" --add "$(readlink -f "$lib")=${lib#/}"
done
python3 scripts/oci-image.py "$name" "$out" --cmd '["/usr/bin/wasmlet","controller"]' "$@" >/dev/null
echo "$name in $out"
if [ -n "$socket" ]; then
    ctr -a "$socket" -n k8s.io images import "$out" >/dev/null
    ctr -a "$socket" -n k8s.io run --rm "$name" wasmlet-image-check /usr/bin/wasmlet controller --help >/dev/null
    echo "imported into $socket; /usr/bin/wasmlet controller --help runs in it"
fi
