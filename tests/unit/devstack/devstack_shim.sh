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

# Stands in for the parts of devstack the resex-libvirt plugin calls, so its
# phases can run here: devstack itself needs a whole host (packages, MySQL,
# RabbitMQ, systemd units) and cannot run in a test.
#
# Sourced before devstack/settings and devstack/plugin.sh by
# tests/unit/devstack/test_plugin.py. Written from devstack's documented
# semantics (inc/ini-config, functions-common), not copied from it:
#
#   (iniset and its kin, is_service_enabled, trueorfalse, warn and die
#   come from tools/devstack-functions.sh, which the cloud uses too)
#   configure_keystoneauth FILE USER SECTION
#                                         password auth of the service user
#                                         USER in SECTION (auth_type,
#                                         auth_url, username, password,
#                                         domains, the service project)
#   $SYSTEMCTL is-active --quiet UNIT     whether the unit's process runs
#   journalctl -u UNIT [--since T] [-n N] the unit's log (its last N lines);
#                                         T is ignored: the log is this run's
#
# Every ini function accepts devstack's leading "-sudo". Side effects are
# recorded, one line each, in $RESEX_TEST_RECORD instead of happening:
#   run_process NAME COMMAND   ->  "run_process NAME|COMMAND"
#   stop_process NAME          ->  "stop_process NAME"
#   setup_develop DIR [EXTRAS] ->  "setup_develop DIR EXTRAS"
#   pip_install ARGS...        ->  "pip_install ARGS"
#   create_service_user NAME [ROLE] -> "create_service_user NAME ROLE"
# and "sudo CMD" runs CMD as the test's user. With RESEX_TEST_RUN_DIR set,
# run_process also starts COMMAND for real, in its own session, its output
# in $RESEX_TEST_RUN_DIR/NAME.log and its PID in NAME.pid: the unit is
# "active" while that process lives, stop_process sends it SIGTERM and
# journalctl reads its log. Without it every unit counts as active.
# get_python_exec_prefix is $RESEX_TEST_BIN (where the test put the
# resex-agent to run).

RESEX_TEST_RECORD=${RESEX_TEST_RECORD:?set RESEX_TEST_RECORD}

# iniset and friends, is_service_enabled, trueorfalse, warn, die.
source "$(dirname "${BASH_SOURCE[0]}")/../../../tools/devstack-functions.sh"

function _shim_record {
    echo "$*" >> "$RESEX_TEST_RECORD"
}

function define_plugin {
    _shim_record "define_plugin $1"
}

function echo_summary {
    echo "summary: $*"
}

function sudo {
    "$@"
}

function get_python_exec_prefix {
    echo "${RESEX_TEST_BIN:-/opt/stack/data/venv/bin}"
}

function create_service_user {
    _shim_record "create_service_user $*"
}

function configure_keystoneauth {
    local file=$1
    local user=$2
    local section=$3
    iniset "$file" "$section" auth_type password
    iniset "$file" "$section" interface public
    iniset "$file" "$section" auth_url "$KEYSTONE_SERVICE_URI"
    iniset "$file" "$section" username "$user"
    iniset "$file" "$section" password "$SERVICE_PASSWORD"
    iniset "$file" "$section" user_domain_name "$SERVICE_DOMAIN_NAME"
    iniset "$file" "$section" project_name "$SERVICE_PROJECT_NAME"
    iniset "$file" "$section" project_domain_name "$SERVICE_DOMAIN_NAME"
}

# The PID behind a unit name devstack@NAME.service, if run for real.
function _shim_unit_pid {
    local name=${1#devstack@}
    name=${name%.service}
    cat "$RESEX_TEST_RUN_DIR/$name.pid" 2>/dev/null
}

function _shim_systemctl {
    if [[ "$1" != "is-active" ]]; then
        _shim_record "systemctl $*"
        return 0
    fi
    local unit=${*: -1}
    if [[ -z "$RESEX_TEST_RUN_DIR" ]]; then
        return 0
    fi
    local pid
    pid=$(_shim_unit_pid "$unit")
    [[ -n "$pid" && -r /proc/$pid/stat ]] || return 3
    # A child that exited but was not reaped yet is a zombie: not active.
    local state
    state=$(awk '{print $3}' "/proc/$pid/stat")
    [[ "$state" != "Z" ]] || return 3
}
SYSTEMCTL=_shim_systemctl

function journalctl {
    local unit=""
    local lines=100000
    while [[ $# -gt 0 ]]; do
        case "$1" in
            -u) unit=$2; shift ;;
            -n) lines=$2; shift ;;
            --since) shift ;;
        esac
        shift
    done
    local name=${unit#devstack@}
    name=${name%.service}
    tail -n "$lines" "$RESEX_TEST_RUN_DIR/$name.log" 2>/dev/null
}

function setup_develop {
    _shim_record "setup_develop $*"
}

function pip_install {
    _shim_record "pip_install $*"
}

function run_process {
    _shim_record "run_process $1|$2"
    if [[ -n "$RESEX_TEST_RUN_DIR" ]]; then
        local log=$RESEX_TEST_RUN_DIR/$1.log
        setsid bash -c "exec $2" > "$log" 2>&1 < /dev/null &
        echo $! > "$RESEX_TEST_RUN_DIR/$1.pid"
    fi
}

function stop_process {
    _shim_record "stop_process $1"
    if [[ -n "$RESEX_TEST_RUN_DIR" && -f "$RESEX_TEST_RUN_DIR/$1.pid" ]]; then
        kill -TERM "$(cat "$RESEX_TEST_RUN_DIR/$1.pid")" 2>/dev/null || true
    fi
}
