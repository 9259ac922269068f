#!/bin/sh
# Build the static BenchEx binary for guests with no Python (busybox initramfs).
# Usage: benchex/build.sh OUTDIR   -> OUTDIR/benchex
set -eu
if [ $# -ne 1 ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
${CC:-gcc} -O2 -Wall -Wextra -static -o "$1/benchex" "$here/benchex.c" -lm
echo "$1/benchex"
