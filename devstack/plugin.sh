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

# devstack/plugin.sh: install, configure, start and stop resex-libvirt.
#
# Phases (devstack sources this file as "plugin.sh <mode> <phase>"):
#   stack install      pip-install the project (editable) with its [libvirt]
#                      extra into devstack's Python environment
#   stack post-config  nova.conf (where n-sch runs): the ResEx filter and
#                      weigher appended to the scheduler's lists, [resex];
#                      /etc/resex/resex-agent.conf and nova-compute's
#                      provider config file (CUSTOM_RESEX_MANAGED) where
#                      resex-agent runs; resex-placement-sync.conf where
#                      resex-placement-sync runs
#   stack extra        "resex-agent --check" (the stack stops, saying why,
#                      when the agent could not run), then run_process, then
#                      a wait for its loop that stops the stack if it exits;
#                      run_process resex-placement-sync
#   unstack            stop resex-agent and resex-placement-sync
#   clean              remove their configuration, state and the provider
#                      config file
#
# Packages (libvirt's headers for libvirt-python) are in devstack/files/
# bindep.txt, which stack.sh installs for every enabled plugin.
#
# nova.conf's lists are appended to, never overwritten, and a second run
# changes nothing: enabled_filters (class names) and weight_classes (import
# paths) are comma-separated lists; available_filters (import paths) is
# multi-valued, one line per value, and keeps nova's default
# nova.scheduler.filters.all_filters when it was unset.

XTRACE_RESEX=$(set +o | grep xtrace)
set -o xtrace

# Nova 34's defaults, in force when nova.conf does not set the option.
RESEX_NOVA_DEFAULT_FILTERS="ComputeFilter,ComputeCapabilitiesFilter"
RESEX_NOVA_DEFAULT_FILTERS+=",ImagePropertiesFilter"
RESEX_NOVA_DEFAULT_FILTERS+=",ServerGroupAntiAffinityFilter"
RESEX_NOVA_DEFAULT_FILTERS+=",ServerGroupAffinityFilter"
RESEX_NOVA_ALL_FILTERS=nova.scheduler.filters.all_filters
RESEX_NOVA_ALL_WEIGHERS=nova.scheduler.weights.all_weighers


# The board backend "auto" stands for on this node: etcd3 where etcd3 runs
# here; SQLite on a node that runs nova-scheduler without etcd3 (the
# all-in-one, whose scheduler reads the same file); otherwise etcd3 on
# $SERVICE_HOST: a compute node publishes where the scheduler reads.
function _resex_board_backend {
    local backend=$RESEX_BOARD_BACKEND
    if [[ "$backend" == "auto" ]]; then
        if is_service_enabled etcd3; then
            backend=etcd3
        elif is_service_enabled n-sch; then
            backend=sqlite
        else
            backend=etcd3
        fi
    fi
    echo "$backend"
}

# The board URL this node's agent and scheduler use (see devstack/settings).
function resex_board_url {
    if [[ -n "$RESEX_BOARD_URL" ]]; then
        echo "$RESEX_BOARD_URL"
        return
    fi
    local host=$SERVICE_HOST
    if [[ "$host" == *:* && "$host" != \[* ]]; then
        host="[$host]"
    fi
    case "$(_resex_board_backend)" in
        etcd3)
            echo "etcd3+http://${host}:${RESEX_ETCD_PORT}"
            ;;
        sqlite)
            echo "sqlite://${RESEX_STATE_DIR}/board.sqlite"
            ;;
    esac
}

# Stop the stack on a board backend this plugin does not know, and on a
# SQLite board where no scheduler reads it (in the main shell:
# resex_board_url runs in command substitutions).
function resex_check_board_backend {
    case "$RESEX_BOARD_BACKEND" in
        auto|etcd3|sqlite)
            ;;
        *)
            local msg="RESEX_BOARD_BACKEND must be auto, etcd3 or sqlite"
            die $LINENO "$msg, not $RESEX_BOARD_BACKEND"
            ;;
    esac
    if [[ -n "$RESEX_BOARD_URL" ]] || ! is_service_enabled resex-agent; then
        return
    fi
    if [[ "$(_resex_board_backend)" == "sqlite" ]] \
            && ! is_service_enabled n-sch; then
        local why="a SQLite board on a node without nova-scheduler is read"
        why+=" by no scheduler: use RESEX_BOARD_BACKEND=etcd3"
        die $LINENO "$why (etcd on \$SERVICE_HOST)"
    fi
}

# Append value to a comma-separated list option unless it is already in it.
# An unset option starts from its default (nova's own), so that enabling
# the plugin never drops what nova would have used.
function _resex_append_to_list {
    local file=$1
    local section=$2
    local option=$3
    local value=$4
    local default=$5
    local current
    current=$(iniget "$file" "$section" "$option")
    current=${current// /}
    if [[ -z "$current" ]]; then
        current=$default
    fi
    if [[ ",$current," == *",$value,"* ]]; then
        iniset "$file" "$section" "$option" "$current"
        return
    fi
    iniset "$file" "$section" "$option" "${current:+$current,}$value"
}

# Add values to a multi-valued option, each once. An unset option first
# gets its default (nova's), which setting any value would otherwise drop.
function _resex_add_to_multi {
    local file=$1
    local section=$2
    local option=$3
    local default=$4
    shift 4
    local current
    current=" $(iniget_multiline "$file" "$section" "$option") "
    if [[ -z "${current// /}" ]]; then
        iniadd "$file" "$section" "$option" "$default"
        current=" $default "
    fi
    local value
    for value in "$@"; do
        if [[ "$current" != *" $value "* ]]; then
            iniadd "$file" "$section" "$option" "$value"
            current+="$value "
        fi
    done
}

function install_resex {
    # BenchEx (the latency wire format) is a distribution of this repository.
    pip_install "$RESEX_DIR/benchex"
    setup_develop "$RESEX_DIR" libvirt
}

# nova.conf of the scheduler: the filter, the weigher, the board.
function configure_resex_nova {
    _resex_add_to_multi "$NOVA_CONF" filter_scheduler available_filters \
        "$RESEX_NOVA_ALL_FILTERS" "$RESEX_FILTER_PATH"
    _resex_append_to_list "$NOVA_CONF" filter_scheduler enabled_filters \
        "$RESEX_FILTER_NAME" "$RESEX_NOVA_DEFAULT_FILTERS"
    _resex_append_to_list "$NOVA_CONF" filter_scheduler weight_classes \
        "$RESEX_WEIGHER_PATH" "$RESEX_NOVA_ALL_WEIGHERS"
    iniset "$NOVA_CONF" resex board_url "$(resex_board_url)"
    if [[ -n "$RESEX_TOPOLOGY_FILE" ]]; then
        iniset "$NOVA_CONF" resex topology_file "$RESEX_TOPOLOGY_FILE"
    fi
}

# The compute host's name as nova-compute reports it: the agent publishes
# under it and the filter matches reports to hosts by it.
function _resex_compute_host {
    local conf
    for conf in "${NOVA_CPU_CONF:-}" "$NOVA_CONF"; do
        if [[ -n "$conf" && -f "$conf" ]]; then
            local host
            host=$(iniget "$conf" DEFAULT host)
            if [[ -n "$host" ]]; then
                echo "$host"
                return
            fi
        fi
    done
    hostname
}

# The plugin's own service user: for resex-placement-sync's Placement
# writes, and the agent's optional compute API lookup (the SLA comes from
# each domain's Nova metadata: the agent needs no credentials).
function create_resex_accounts {
    create_service_user "$RESEX_SERVICE_USER" "admin"
}

function configure_resex_agent {
    sudo install -d -o "$STACK_USER" -m 0755 "$RESEX_CONF_DIR" \
        "$RESEX_STATE_DIR" "$RESEX_RUN_DIR"
    local conf=$RESEX_AGENT_CONF
    iniset "$conf" agent host "$(_resex_compute_host)"
    iniset "$conf" agent host_driver libvirt
    iniset "$conf" agent state_dir "$RESEX_STATE_DIR"
    iniset "$conf" libvirt connection_uri "$RESEX_LIBVIRT_URI"
    iniset "$conf" market policy "$RESEX_POLICY"
    iniset "$conf" agent cap_consent "$RESEX_CAP_CONSENT"
    if [[ -n "$RESEX_CONSENT_PROJECTS" ]]; then
        iniset "$conf" agent consent_projects "$RESEX_CONSENT_PROJECTS"
    fi
    if [[ -n "$RESEX_CONSENT_FLAVORS" ]]; then
        iniset "$conf" agent consent_flavors "$RESEX_CONSENT_FLAVORS"
    fi
    iniset "$conf" fabric source "$RESEX_FABRIC_SOURCE"
    if [[ -n "$RESEX_UPLINK_NETDEV" ]]; then
        iniset "$conf" fabric uplink_netdev "$RESEX_UPLINK_NETDEV"
    fi
    if [[ -n "$RESEX_LINK_CAPACITY_GBPS" ]]; then
        iniset "$conf" fabric link_capacity_gbps "$RESEX_LINK_CAPACITY_GBPS"
    fi
    iniset "$conf" board url "$(resex_board_url)"
    iniset "$conf" latency probe_socket_path "$RESEX_RUN_DIR/latency.sock"
    iniset "$conf" metrics enabled "$RESEX_METRICS_ENABLED"
    iniset "$conf" metrics port "$RESEX_METRICS_PORT"
    iniset "$conf" remote_claims enabled "$RESEX_REMOTE_CLAIMS"
    if [[ -n "$RESEX_TOPOLOGY_FILE" && $RESEX_REMOTE_CLAIMS == True ]]; then
        iniset "$conf" remote_claims topology_file "$RESEX_TOPOLOGY_FILE"
    fi
    iniset "$conf" nova sla_lookup "$RESEX_NOVA_SLA_LOOKUP"
    if [[ "$RESEX_NOVA_SLA_LOOKUP" == "True" ]]; then
        configure_keystoneauth "$conf" "$RESEX_SERVICE_USER" nova
        iniset "$conf" nova region_name "$REGION_NAME"
    fi
}

# The nova.conf nova-compute reads on this node.
function _resex_compute_conf {
    if [[ -n "${NOVA_CPU_CONF:-}" && -f "${NOVA_CPU_CONF:-}" ]]; then
        echo "$NOVA_CPU_CONF"
    else
        echo "$NOVA_CONF"
    fi
}

# Where nova-compute reads provider config files: nova.conf's [compute]
# provider_config_location, else nova's default.
function _resex_provider_config_dir {
    local dir
    dir=$(iniget "$(_resex_compute_conf)" compute provider_config_location)
    echo "${dir:-/etc/nova/provider_config}"
}

# nova-compute's provider config (nova's schema 1.0): CUSTOM_RESEX_MANAGED
# on this node's compute node provider, read when nova-compute starts.
function configure_resex_provider_config {
    local dir
    dir=$(_resex_provider_config_dir)
    local id="uuid: '\$COMPUTE_NODE'"
    if [[ -n "$RESEX_PROVIDER_NAME" ]]; then
        id="name: '$RESEX_PROVIDER_NAME'"
    fi
    sudo install -d -m 0755 "$dir"
    sudo tee "$dir/$RESEX_PROVIDER_CONFIG_FILE" > /dev/null <<EOF
# Written by the resex-libvirt devstack plugin: resex-agent runs on this
# node. Flavors may require the trait (trait:CUSTOM_RESEX_MANAGED=required).
meta:
  schema_version: '1.0'
providers:
  - identification:
      $id
    traits:
      additional:
        - CUSTOM_RESEX_MANAGED
EOF
}

# resex-placement-sync's configuration: the scheduler's board and its own
# Placement credentials.
function configure_resex_placement_sync {
    sudo install -d -o "$STACK_USER" -m 0755 "$RESEX_CONF_DIR"
    local conf=$RESEX_PLACEMENT_SYNC_CONF
    iniset "$conf" resex board_url "$(resex_board_url)"
    configure_keystoneauth "$conf" "$RESEX_SERVICE_USER" placement_sync
    iniset "$conf" placement_sync region_name "$REGION_NAME"
}

function _resex_placement_sync_command {
    local bin
    bin=$(get_python_exec_prefix)
    echo "$bin/resex-placement-sync --config-file $RESEX_PLACEMENT_SYNC_CONF"
}

# The agent's command line.
function _resex_agent_command {
    local bin
    bin=$(get_python_exec_prefix)
    echo "$bin/resex-agent --config-file $RESEX_AGENT_CONF"
}

# Wait until the agent says its control loop runs ("agent on HOST: ...") or
# its unit stops; in the latter case stop the stack with its last log lines
# (an agent that cannot start exits: another agent already runs here).
# After RESEX_AGENT_START_WAIT seconds with neither, go on with a warning.
function _resex_wait_for_agent {
    local since=$1
    local unit=devstack@resex-agent.service
    local deadline
    deadline=$((SECONDS + RESEX_AGENT_START_WAIT))
    while true; do
        if ! $SYSTEMCTL is-active --quiet "$unit"; then
            local tail
            tail=$(sudo journalctl -u "$unit" --since "$since" -n 20 \
                --no-pager 2>&1)
            die $LINENO "resex-agent exited at start; its last lines:
$tail"
        fi
        if sudo journalctl -u "$unit" --since "$since" --no-pager 2>/dev/null \
                | grep -q "agent on .*: interval"; then
            return
        fi
        if (( SECONDS >= deadline )); then
            warn $LINENO "resex-agent runs but has not started its loop" \
                "after ${RESEX_AGENT_START_WAIT}s: journalctl -u $unit"
            return
        fi
        sleep 1
    done
}

function start_resex_agent {
    local cmd
    cmd=$(_resex_agent_command)
    local report
    if ! report=$($cmd --check 2>&1); then
        die $LINENO "resex-agent --check failed, not starting the agent:
$report"
    fi
    local since
    since=$(date '+%Y-%m-%d %H:%M:%S')
    run_process resex-agent "$cmd"
    _resex_wait_for_agent "$since"
}

function stop_resex_agent {
    stop_process resex-agent
}

function cleanup_resex {
    sudo rm -rf "$RESEX_CONF_DIR" "$RESEX_STATE_DIR" "$RESEX_RUN_DIR"
    if is_service_enabled resex-agent; then
        sudo rm -f "$(_resex_provider_config_dir)/$RESEX_PROVIDER_CONFIG_FILE"
    fi
}

if [[ "$1" == "stack" && "$2" == "install" ]]; then
    echo_summary "Installing resex-libvirt"
    install_resex
elif [[ "$1" == "stack" && "$2" == "post-config" ]]; then
    echo_summary "Configuring resex-libvirt"
    resex_check_board_backend
    if is_service_enabled n-sch; then
        configure_resex_nova
    fi
    if is_service_enabled resex-agent; then
        configure_resex_agent
        configure_resex_provider_config
    fi
    if is_service_enabled resex-placement-sync; then
        configure_resex_placement_sync
    fi
    if is_service_enabled keystone \
            && { [[ "$RESEX_NOVA_SLA_LOOKUP" == "True" ]] \
            || is_service_enabled resex-placement-sync; }; then
        create_resex_accounts
    fi
elif [[ "$1" == "stack" && "$2" == "extra" ]]; then
    if is_service_enabled resex-agent; then
        echo_summary "Starting resex-agent"
        start_resex_agent
    fi
    if is_service_enabled resex-placement-sync; then
        echo_summary "Starting resex-placement-sync"
        run_process resex-placement-sync "$(_resex_placement_sync_command)"
    fi
fi

if [[ "$1" == "unstack" ]]; then
    if is_service_enabled resex-agent; then
        stop_resex_agent
    fi
    if is_service_enabled resex-placement-sync; then
        stop_process resex-placement-sync
    fi
fi

if [[ "$1" == "clean" ]]; then
    cleanup_resex
fi

$XTRACE_RESEX
