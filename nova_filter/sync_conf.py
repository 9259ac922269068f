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

"""Options of ``resex-placement-sync``: group ``[placement_sync]``.

The service also reads the scheduler's ``[resex]`` group
(:mod:`resex_nova.conf`: the board, ``max_age``, ``congestion_threshold``
and the admission constants), so that its trait flips where the filter
would refuse. ``[placement_sync]`` holds its own behaviour and its Placement
credentials: keystoneauth's session, auth plugin and adapter options,
registered with keystoneauth's loading helpers as nova registers its own
``[placement]`` group. Only this service needs them; the agents need none.
``list_opts()`` feeds ``oslo-config-generator --namespace
resex.placement_sync``.
"""

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from resex_nova import traits as traits_mod

GROUP = "placement_sync"
DEFAULT_SERVICE_TYPE = "placement"

#: Seconds per HTTP request unless ``timeout`` says otherwise: keystoneauth's
#: own default is no timeout at all.
DEFAULT_TIMEOUT = 10.0

sync_group = cfg.OptGroup(
    GROUP, title="resex-placement-sync: the board's verdicts as Placement traits",
    help="""
resex-placement-sync keeps the trait CUSTOM_RESEX_CLOSED on each compute
node's resource provider in step with the price board's admission state, so
that a latency-sensitive flavor with ``trait:CUSTOM_RESEX_CLOSED=forbidden``
is kept off congested nodes by Placement itself, before nova's
``max_placement_results`` cut and for schedulers that never read the board.
One per region. The options of ``[resex]`` (the board and the admission
rule) apply as in nova.conf.
""")

SYNC_OPTS = [
    cfg.StrOpt("unknown_host_policy",
               default=traits_mod.UNKNOWN_CLOSED,
               choices=[
                   (traits_mod.UNKNOWN_CLOSED,
                    "A node with no fresh report (no agent, agent down, blind, or older "
                    "than [resex] max_age) carries CUSTOM_RESEX_CLOSED: nothing protects "
                    "a latency-sensitive VM placed there."),
                   (traits_mod.UNKNOWN_KEEP,
                    "Leave the node's trait as it is."),
                   (traits_mod.UNKNOWN_OPEN,
                    "Clear the trait, as on a quiet reporting node."),
               ],
               help="""
What a node whose report is missing or stale gets. Placement has no "only
when nothing better is left" (the filter's ``unknown_host_policy = last``),
so the default closes such a node to flavors that forbid the trait. While
the service cannot read the board itself, it changes no trait.

Related options:

* ``[resex] max_age``
"""),
    cfg.FloatOpt("reconcile_interval",
                 default=60.0, min=5.0, max=86400.0,
                 help="""
Seconds between two full reconciliations: two listings (the providers with
CUSTOM_RESEX_CLOSED, those with CUSTOM_RESEX_MANAGED) compared with the
board, and a write for each node that differs. Catches a trait removed by
another writer (nova-compute's periodic update, an operator) and how long
it was missing (logged). Between them only board changes cause calls.

Possible values:

* A number of seconds; nova-compute's resource update runs every 60 s.
"""),
    cfg.FloatOpt("max_calls_per_second",
                 default=10.0, min=0.0,
                 help="""
Most Placement calls a second, on average (a token bucket of as many at
once). A write is two calls (read, then write), more on 409 conflicts.

Possible values:

* A positive number; 0 means no limit.
"""),
    cfg.FloatOpt("retry_max_interval",
                 default=60.0, min=1.0, max=3600.0,
                 help="""
Longest wait, in seconds, between two attempts while Placement fails (the
wait doubles from 1 s up to this). The traits already written stay; the
service keeps following the board and writes what changed once Placement
answers.
"""),
    cfg.DictOpt("provider_names",
                default={},
                help="""
Resource provider names of hosts whose provider is not named after the
host. The board names a host as nova-compute's ``[DEFAULT] host`` does; a
compute node's provider is named after its ``hypervisor_hostname`` (for
libvirt, the host's name as libvirt reports it, which may be the FQDN).

Possible values:

* ``host:provider`` pairs, comma-separated, e.g.
  ``compute1:compute1.example.org``. Unset: the host's own name.
"""),
    cfg.PortOpt("metrics_port",
                default=0,
                help="""
TCP port of the service's Prometheus endpoint (``GET /metrics``): the
Placement calls by method and outcome, the traits set and cleared, the 409s
retried, the reconciliations and their duration, the seconds since the last
good one, the hosts without a resource provider, the rate limiter's waits.
Not served with ``--once``.

Possible values:

* ``0`` (default): no endpoint
* 1..65535: listen on ``metrics_host`` at this port

Related options:

* ``metrics_host``
"""),
    cfg.HostAddressOpt("metrics_host",
                       default="127.0.0.1",
                       help="""
Address the Prometheus endpoint listens on (when ``metrics_port`` is set).
The endpoint has no authentication: keep it on loopback or a management
network.

Possible values:

* An IPv4 or IPv6 address, or a host name; ``0.0.0.0`` or ``::`` for every
  interface

Related options:

* ``metrics_port``
"""),
]


def _session_opts():
    opts = ks_loading.get_session_conf_options()
    for opt in opts:
        if opt.dest == "timeout":
            opt.default = DEFAULT_TIMEOUT
    return opts


def _adapter_opts():
    opts = ks_loading.get_adapter_conf_options(include_deprecated=False)
    for opt in opts:
        if opt.dest == "service_type":
            opt.default = DEFAULT_SERVICE_TYPE
    return opts


def _fresh():
    # A private OptGroup per ConfigOpts (oslo.config keeps state on it).
    return cfg.OptGroup(sync_group.name, title=sync_group.title, help=sync_group.help)


def register_opts(conf):
    """Register ``[placement_sync]`` with keystoneauth's options in ``conf``."""
    conf.register_group(_fresh())
    conf.register_opts(SYNC_OPTS, group=GROUP)
    ks_loading.register_session_conf_options(conf, GROUP)
    ks_loading.register_auth_conf_options(conf, GROUP)
    ks_loading.register_adapter_conf_options(conf, GROUP, include_deprecated=False)
    conf.set_default("service_type", DEFAULT_SERVICE_TYPE, group=GROUP)
    conf.set_default("timeout", DEFAULT_TIMEOUT, group=GROUP)


def list_opts():
    return [(sync_group,
             SYNC_OPTS
             + _session_opts()
             + ks_loading.get_auth_common_conf_options()
             + ks_loading.get_auth_plugin_conf_options("password")
             + ks_loading.get_auth_plugin_conf_options("v3password")
             + _adapter_opts())]
