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

# The price board's etcd users and roles: each compute node may write only
# its own key (<prefix><host>), the readers (the scheduler, resex-board) may
# read the prefix and write nothing; then etcd's authentication is switched
# on. etcdctl is configured by its own environment (ETCDCTL_ENDPOINTS,
# ETCDCTL_CACERT, ETCDCTL_CERT and ETCDCTL_KEY: root's certificate from
# tools/board-certs.sh). Each user's password (the board's JSON gateway
# authenticates by password) is read from, or made into, PWDIR/<user>.password
# (mode 0600). Users and roles that exist are kept: run again to add hosts.
# Every etcdctl command is printed before it runs.
# See doc/source/board.rst ("Certificates and users").
set -euo pipefail

usage() {
    echo "usage: $0 [-p PREFIX] -r READER [-r ...] PWDIR HOST [HOST ...]" >&2
    exit 2
}

prefix=/resex/board/
readers=()
while getopts "p:r:h" opt; do
    case "$opt" in
    p) prefix="$OPTARG" ;;
    r) readers+=("$OPTARG") ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ "$#" -ge 2 ] && [ "${#readers[@]}" -gt 0 ] || usage
pwdir="$1"
shift
umask 077
mkdir -p "$pwdir"

run() {
    echo "etcdctl $*"
    etcdctl "$@" > /dev/null
}

# user NAME: add etcd's user NAME with its password, unless it exists.
user() {
    etcdctl user get "$1" > /dev/null 2>&1 && return 0
    [ -s "$pwdir/$1.password" ] || openssl rand -hex 24 > "$pwdir/$1.password"
    echo "etcdctl user add $1 --interactive=false < $pwdir/$1.password"
    etcdctl user add "$1" --interactive=false < "$pwdir/$1.password" > /dev/null
}

role() {
    etcdctl role get "$1" > /dev/null 2>&1 || run role add "$1"
}

user root
run user grant-role root root
for host in "$@"; do
    user "$host"
    role "$host"
    run role grant-permission "$host" readwrite "$prefix$host"
    run user grant-role "$host" "$host"
done
role board-reader
run role grant-permission board-reader read "$prefix" --prefix=true
for reader in "${readers[@]}"; do
    user "$reader"
    run user grant-role "$reader" board-reader
done
run auth enable
