#!/bin/sh
# Prints the path of deterministic.so (beside this script: deterministic.c and
# stable_dev.c, which say what it does), compiling it first if needed with the machine's
# C compiler into ${XDG_CACHE_HOME:-~/.cache}/wasmlet/. Exit 3, and why on stderr, when
# there is no C compiler: the plugin still builds, but not byte for byte the same twice.
set -eu
dir=$(cd "$(dirname "$0")" && pwd)
cc=${CC:-cc}
command -v "$cc" >/dev/null 2>&1 || {
    echo "no C compiler ($cc) to build $dir/deterministic.c: the component will not be reproducible" >&2
    exit 3
}
cache=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/wasmlet
sum=$(cat "$dir/deterministic.c" "$dir/stable_dev.c" | sha256sum | cut -c1-16)
so=$cache/deterministic-$sum.so
if [ ! -f "$so" ]; then
    mkdir -p "$cache"
    "$cc" -O2 -shared -fPIC -o "$so.$$" "$dir/deterministic.c" "$dir/stable_dev.c" -ldl >&2
    mv "$so.$$" "$so"
fi
echo "$so"
