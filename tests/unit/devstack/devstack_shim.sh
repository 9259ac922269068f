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
#   iniset FILE SECTION OPTION VALUE      OPTION = VALUE in SECTION: replaces
#                                         the option's line(s) in place, or
#                                         adds it after the section header;
#                                         adds the section (and the file) if
#                                         missing
#   iniget FILE SECTION OPTION            the option's value ("" if unset)
#   iniget_multiline FILE SECTION OPTION  every value, space-separated
#   iniset_multiline FILE SECTION OPTION V1 V2...
#                                         one "OPTION = Vi" line per value,
#                                         replacing every previous line
#   iniadd FILE SECTION OPTION V1 V2...   the previous values, then V1 V2...
#                                         (appends, never replaces)
#   inicomment FILE SECTION OPTION        comments the option's line(s) out
#   is_service_enabled S1 S2...           true if any Si is in
#                                         $ENABLED_SERVICES (comma-separated)
#   trueorfalse DEFAULT VARNAME           True/False for the variable's
#                                         value (1/yes/true, 0/no/false in
#                                         any usual case), else DEFAULT
#   configure_keystoneauth FILE USER SECTION
#                                         password auth of the service user
#                                         USER in SECTION (auth_type,
#                                         auth_url, username, password,
#                                         domains, the service project)
#   warn LINENO MESSAGE...                MESSAGE on stderr
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

function _shim_record {
    echo "$*" >> "$RESEX_TEST_RECORD"
}

function define_plugin {
    _shim_record "define_plugin $1"
}

function echo_summary {
    echo "summary: $*"
}

function warn {
    local line=$1
    shift
    echo "warn (line $line): $*" >&2
}

function die {
    echo "die (line $1): $2" >&2
    exit 1
}

function sudo {
    "$@"
}

function get_python_exec_prefix {
    echo "${RESEX_TEST_BIN:-/opt/stack/data/venv/bin}"
}

function trueorfalse {
    local default=$1
    local testval=${!2:-}
    case "$testval" in
        1|yes|Yes|YES|true|True|TRUE) echo "True" ;;
        0|no|No|NO|false|False|FALSE) echo "False" ;;
        *) echo "$default" ;;
    esac
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

function is_service_enabled {
    local service
    for service in "$@"; do
        if [[ ",$ENABLED_SERVICES," == *",$service,"* ]]; then
            return 0
        fi
    done
    return 1
}

# Every value of OPTION in SECTION of FILE, one per line.
function _shim_ini_values {
    [[ -f "$1" ]] || return 0
    awk -v sec="$2" -v opt="$3" '
        /^\[[^]]*\]/ { insec = ($0 == "[" sec "]"); next }
        insec && $0 ~ ("^" opt "[ \t]*=") {
            v = $0; sub(/^[^=]*=[ \t]*/, "", v); print v
        }' "$1"
}

# Replace OPTION's lines in SECTION of FILE with one line per VALUE.
function _shim_ini_write {
    local file=$1
    local section=$2
    local option=$3
    shift 3
    local present=0
    if [[ -n "$(_shim_ini_values "$file" "$section" "$option")" ]]; then
        present=1
    fi
    [[ -f "$file" ]] || : > "$file"
    local tmp
    tmp=$(mktemp)
    awk -v sec="$section" -v opt="$option" -v present="$present" \
        -v vals="$(printf '%s\n' "$@")" '
        function emit(    n, i, parts) {
            if (done) return
            n = split(vals, parts, "\n")
            for (i = 1; i <= n; i++)
                if (parts[i] != "") print opt " = " parts[i]
            done = 1
        }
        /^\[[^]]*\]/ {
            insec = ($0 == "[" sec "]"); print
            if (insec) { seen = 1; if (!present) emit() }
            next
        }
        insec && $0 ~ ("^" opt "[ \t]*=") { emit(); next }
        { print }
        END { if (!seen) { print ""; print "[" sec "]"; emit() } }
        ' "$file" > "$tmp"
    cat "$tmp" > "$file"
    rm -f "$tmp"
}

function iniset {
    [[ "$1" == "-sudo" ]] && shift
    _shim_ini_write "$1" "$2" "$3" "$4"
}

function iniget {
    _shim_ini_values "$1" "$2" "$3" | head -n 1
}

function iniget_multiline {
    local values
    values=$(_shim_ini_values "$1" "$2" "$3")
    echo ${values}
}

function iniset_multiline {
    [[ "$1" == "-sudo" ]] && shift
    local file=$1
    local section=$2
    local option=$3
    shift 3
    _shim_ini_write "$file" "$section" "$option" "$@"
}

function iniadd {
    [[ "$1" == "-sudo" ]] && shift
    local file=$1
    local section=$2
    local option=$3
    shift 3
    local previous
    previous=$(iniget_multiline "$file" "$section" "$option")
    iniset_multiline "$file" "$section" "$option" ${previous} "$@"
}

function inicomment {
    [[ "$1" == "-sudo" ]] && shift
    local tmp
    tmp=$(mktemp)
    awk -v sec="$2" -v opt="$3" '
        /^\[[^]]*\]/ { insec = ($0 == "[" sec "]"); print; next }
        insec && $0 ~ ("^" opt "[ \t]*=") { print "#" $0; next }
        { print }' "$1" > "$tmp"
    cat "$tmp" > "$1"
    rm -f "$tmp"
}
