#!/bin/sh
# Prints the path of deterministic.so (beside this script: deterministic.c, which says
# what it does), compiling it first if needed with the machine's C compiler into
# ${XDG_CACHE_HOME:-~/.cache}/wasmlet/. Exit 3, and why on stderr, when there is no C
# compiler: the plugin still builds, but not byte for byte the same twice.
set -eu
src=$(cd "$(dirname "$0")" && pwd)/deterministic.c
cc=${CC:-cc}
command -v "$cc" >/dev/null 2>&1 || {
    echo "no C compiler ($cc) to build $src: the component will not be reproducible" >&2
    exit 3
}
cache=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/wasmlet
sum=$(sha256sum "$src" | cut -c1-16)
so=$cache/deterministic-$sum.so
if [ ! -f "$so" ]; then
    mkdir -p "$cache"
    "$cc" -O2 -shared -fPIC -o "$so.$$" "$src" -ldl >&2
    mv "$so.$$" "$so"
fi
echo "$so"
