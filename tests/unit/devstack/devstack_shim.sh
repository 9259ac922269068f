#!/bin/bash
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
#
# Every ini function accepts devstack's leading "-sudo". Side effects are
# recorded, one line each, in $RESEX_TEST_RECORD instead of happening:
#   run_process NAME COMMAND   ->  "run_process NAME|COMMAND"
#   stop_process NAME          ->  "stop_process NAME"
#   setup_develop DIR [EXTRAS] ->  "setup_develop DIR EXTRAS"
#   pip_install ARGS...        ->  "pip_install ARGS"
# and "sudo CMD" runs CMD as the test's user.

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

function die {
    echo "die (line $1): $2" >&2
    exit 1
}

function sudo {
    "$@"
}

function get_python_exec_prefix {
    echo "/opt/stack/data/venv/bin"
}

function setup_develop {
    _shim_record "setup_develop $*"
}

function pip_install {
    _shim_record "pip_install $*"
}

function run_process {
    _shim_record "run_process $1|$2"
}

function stop_process {
    _shim_record "stop_process $1"
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
