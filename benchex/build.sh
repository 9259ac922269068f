#!/bin/sh
# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

# Build the static BenchEx binary for guests with no Python (busybox initramfs),
# and, when rdma-core's headers are installed (libibverbs-dev, librdmacm-dev),
# benchex-verbs: the same program with --transport verbs (dynamically linked
# to libibverbs/librdmacm, whose providers are loaded at run time).
# Usage: benchex/build.sh OUTDIR   -> OUTDIR/benchex [OUTDIR/benchex-verbs]
set -eu
if [ $# -ne 1 ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
${CC:-gcc} -O2 -Wall -Wextra -static -o "$1/benchex" "$here/benchex.c" -lm
echo "$1/benchex"
if [ -e /usr/include/rdma/rdma_cma.h ] && [ -e /usr/include/infiniband/verbs.h ]; then
    ${CC:-gcc} -O2 -Wall -Wextra -DBENCHEX_VERBS -o "$1/benchex-verbs" "$here/benchex.c" \
        -lrdmacm -libverbs -lm
    echo "$1/benchex-verbs"
fi
