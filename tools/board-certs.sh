#!/bin/bash
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

# The price board's etcd certificates: a CA, a server certificate per etcd
# member, a client certificate per compute node, for the scheduler and for
# resex-board, and root's for etcdctl. etcd (--client-cert-auth) takes a
# gRPC client's user from its certificate's common name: root's is CN=root.
# Through etcd's JSON gateway, which the board speaks, a certificate with a
# common name is refused once etcd's authentication is on (HTTP 400), so the
# board's certificates name their holder in OU= and have no CN; the board's
# user is its password. Keys are EC P-256 and mode 0600. Run again with more
# hosts: an existing CA and existing certificates are kept, the missing made.
# See doc/source/board.rst ("Certificates and users").
set -euo pipefail

usage() {
    cat >&2 <<EOF
usage: $0 [-d DAYS] -m NAME=ADDR[,ADDR...] [-m ...] -c HOST [-c ...] -s SCHEDULER OUTDIR
  -m  an etcd member: its name and the addresses clients dial (IPs or DNS names)
  -c  a compute node's host name (nova's), its certificate's OU and etcd user
  -s  the scheduler's etcd user (its certificate's OU)
  -d  days the certificates are valid (default 825)
EOF
    exit 2
}

days=825
members=()
hosts=()
scheduler=""
while getopts "d:m:c:s:h" opt; do
    case "$opt" in
    d) days="$OPTARG" ;;
    m) members+=("$OPTARG") ;;
    c) hosts+=("$OPTARG") ;;
    s) scheduler="$OPTARG" ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ "$#" -eq 1 ] && [ "${#members[@]}" -gt 0 ] && [ "${#hosts[@]}" -gt 0 ] \
    && [ -n "$scheduler" ] || usage
out="$1"

umask 077
mkdir -p "$out"
cd "$out"
key=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)

if [ ! -e ca.key ]; then
    openssl req -x509 "${key[@]}" -keyout ca.key -out ca.pem -days "$days" \
        -subj "/CN=resex-board-ca" -addext "basicConstraints=critical,CA:true" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

# sign NAME SUBJECT EXTENSIONS: NAME.key and NAME.pem, signed by the CA, unless present.
sign() {
    [ -e "$1.pem" ] && [ -e "$1.key" ] && return 0
    printf '%b\n' "$3" > "$1.ext"
    openssl req "${key[@]}" -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
    openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
        -days "$days" -extfile "$1.ext" -out "$1.pem" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
    echo "$out/$1.pem ($2)"
}

for member in "${members[@]}"; do
    name="${member%%=*}"
    [ "$name" != "$member" ] || usage
    sans="DNS:$name"
    IFS=, read -ra addrs <<< "${member#*=}"
    for addr in "${addrs[@]}"; do
        if [[ "$addr" =~ ^[0-9.]+$ || "$addr" == *:* ]]; then
            sans="$sans,IP:$addr"
        else
            sans="$sans,DNS:$addr"
        fi
    done
    # etcd's JSON gateway dials the member's own gRPC port with this
    # certificate: it must be good for client authentication as well.
    sign "member-$name" "/CN=$name" \
        "subjectAltName=$sans\nextendedKeyUsage=serverAuth,clientAuth"
done

sign client-root /CN=root "extendedKeyUsage=clientAuth"
for who in "$scheduler" resex-board "${hosts[@]}"; do
    sign "client-$who" "/O=resex-board/OU=$who" "extendedKeyUsage=clientAuth"
done
chmod 0600 ./*.key
