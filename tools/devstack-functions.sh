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


# devstack's functions that devstack/plugin.sh's configuration phases call
# (inc/ini-config and functions-common), for running those phases outside
# devstack: the cloud of `make cloud` (tests/cloud) configures nova.conf and
# the agent by running plugin.sh's post-config phase on them, and the unit
# tests' devstack shim (tests/unit/devstack) sources this file too. Written
# from devstack's documented semantics, not copied from it:
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
#   warn LINENO MESSAGE...                MESSAGE on stderr
#   die LINENO MESSAGE                    MESSAGE on stderr, exit 1
#
# Every ini function accepts devstack's leading "-sudo".

function warn {
    local line=$1
    shift
    echo "warn (line $line): $*" >&2
}

function die {
    echo "die (line $1): $2" >&2
    exit 1
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
function _resex_ini_values {
    [[ -f "$1" ]] || return 0
    awk -v sec="$2" -v opt="$3" '
        /^\[[^]]*\]/ { insec = ($0 == "[" sec "]"); next }
        insec && $0 ~ ("^" opt "[ \t]*=") {
            v = $0; sub(/^[^=]*=[ \t]*/, "", v); print v
        }' "$1"
}

# Replace OPTION's lines in SECTION of FILE with one line per VALUE.
function _resex_ini_write {
    local file=$1
    local section=$2
    local option=$3
    shift 3
    local present=0
    if [[ -n "$(_resex_ini_values "$file" "$section" "$option")" ]]; then
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
    _resex_ini_write "$1" "$2" "$3" "$4"
}

function iniget {
    _resex_ini_values "$1" "$2" "$3" | head -n 1
}

function iniget_multiline {
    local values
    values=$(_resex_ini_values "$1" "$2" "$3")
    echo ${values}
}

function iniset_multiline {
    [[ "$1" == "-sudo" ]] && shift
    local file=$1
    local section=$2
    local option=$3
    shift 3
    _resex_ini_write "$file" "$section" "$option" "$@"
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
