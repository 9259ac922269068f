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

"""Options of the agent's Prometheus endpoint: group ``[metrics]``.

The endpoint is off by default: it is one more listening socket on a
compute node, and its labels name the tenants' VMs. See
:mod:`resex_agent.metrics` for what it exports.
"""

from oslo_config import cfg

GROUP = "metrics"

metrics_group = cfg.OptGroup(
    GROUP, title="Prometheus metrics",
    help="The agent's Prometheus endpoint: per-VM caps, weights, Reso balances, "
         "charging rates, CPU and MTU rates, latency windows; the host's prices and "
         "congestion index.")

OPTS = [
    cfg.BoolOpt(
        "enabled",
        default=False,
        help="""
Serve Prometheus metrics over HTTP (``GET /metrics``).

Possible values:

* ``false`` (default): no endpoint, nothing is collected
* ``true``: listen on ``bind_address``:``port``

Related options:

* ``bind_address``, ``port``
"""),
    cfg.HostAddressOpt(
        "bind_address",
        default="127.0.0.1",
        help="""
Address the metrics endpoint listens on.

The endpoint has no authentication and its labels carry VM names and UUIDs:
keep it on loopback (scraped through a local exporter or proxy) or on a
management network.

Possible values:

* An IPv4 or IPv6 address, or a host name; ``0.0.0.0`` or ``::`` for every
  interface

Related options:

* ``enabled``, ``port``
"""),
    cfg.PortOpt(
        "port",
        default=9779,
        help="""
TCP port of the metrics endpoint.

Possible values:

* 1..65535 (9779 by default); 0 lets the kernel choose a free port (tests)

Related options:

* ``enabled``, ``bind_address``
"""),
]


def register_opts(conf):
    # A private copy of the group per ConfigOpts (overrides live on the group).
    conf.register_group(cfg.OptGroup(metrics_group.name, title=metrics_group.title,
                                     help=metrics_group.help))
    conf.register_opts(OPTS, group=metrics_group.name)


def list_opts():
    return [(metrics_group, OPTS)]
