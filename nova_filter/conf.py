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

"""The ``[resex]`` options of nova.conf (the scheduler side of ResEx).

Registered into nova's ``CONF`` by the filter and weigher modules (nova's
own ``nova/conf`` does the same at import); ``list_opts()`` feeds
``oslo-config-generator --namespace resex.nova``
(``etc/resex/resex-nova-config-generator.conf``).

Thresholds and the multiplier can be overridden per host aggregate with the
metadata keys in :data:`AGGREGATE_KEYS`, read like nova's own
``*_weight_multiplier`` keys (``nova.scheduler.utils.get_weight_multiplier``;
the minimum wins when a host is in several aggregates).
"""

from oslo_config import cfg

GROUP = "resex"

#: Option name -> aggregate metadata key that overrides it per host.
AGGREGATE_KEYS = {
    "congestion_threshold": "resex_congestion_threshold",
    "bulk_max_sensitive_vms": "resex_bulk_max_sensitive_vms",
    "weight_multiplier": "resex_weight_multiplier",
}

resex_group = cfg.OptGroup(
    GROUP, title="ResEx congestion-aware scheduling",
    help="""
Options of the ResExCongestionFilter and ResExCongestionWeigher, which read
the ResEx price board (host reports published by the resex-agent on every
compute node) to keep latency-sensitive instances (flavor extra spec
``resex:latency_sla_us``) off congested hosts and heavy I/O instances
(``resex:io_class=bulk``) away from hosts with latency-sensitive tenants.
""")

board_opts = [
    cfg.StrOpt("board_url",
               default="sqlite:///var/lib/resex/board.sqlite",
               help="""
Where the resex-agents publish their host reports.

Possible values:

* ``sqlite:///absolute/path``: a SQLite file (all-in-one deployments: the
  scheduler and the agent share the file system). The URL's path is the
  file's absolute path.
* ``etcd3+http://host:port`` or ``etcd3+https://host:port``: an etcd v3
  cluster (multi-node deployments; devstack runs etcd on the controller).
  Name every member of a cluster, comma-separated
  (``etcd3+http://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379``; port 2379
  when left out, IPv6 addresses in brackets): the scheduler's reader moves
  to the next member when one is down, silent or without a leader.

Related options:

* ``[board] url`` in resex-agent.conf must name the same board.
* ``etcd_prefix``, ``board_timeout``
"""),
    cfg.StrOpt("etcd_prefix",
               default="/resex/board/",
               help="""
Key prefix of the host reports in etcd.

Possible values:

* A key prefix ending in ``/``; the agents' ``[board] etcd_prefix``.

Related options:

* ``board_url``: only used with an ``etcd3+`` URL.
"""),
    cfg.FloatOpt("board_timeout",
                 default=2.0, min=0.1, max=60.0,
                 help="""
Timeout of every board call, in seconds (etcd: the whole call, shared
between the members tried when ``board_url`` names several; SQLite busy
wait).

Possible values:

* A positive number of seconds.
"""),
    cfg.StrOpt("board_ca_cert",
               help="""
CA bundle that verifies an ``etcd3+https`` board's certificate.

Possible values:

* A file path, or unset to use the system's CA store.

Related options:

* ``board_url``
"""),
    cfg.StrOpt("board_cert_file",
               help="""
Client certificate the scheduler presents to an ``etcd3+https`` board whose
etcd requires one (``--client-cert-auth``), with ``board_key_file``.

Possible values:

* A file path (PEM), or unset: no client certificate.

Related options:

* ``board_key_file``, ``board_ca_cert``
"""),
    cfg.StrOpt("board_key_file",
               help="""
Private key of ``board_cert_file`` (PEM, unencrypted). Set both or neither.

Related options:

* ``board_cert_file``
"""),
    cfg.FloatOpt("max_age",
                 default=60.0, min=1.0,
                 help="""
Age, in seconds, after which a host report is stale.

A stale report is treated as missing (``unknown_host_policy`` applies).
Freshness is judged by the report's own timestamp, never by whether the
host's key exists.

Possible values:

* A number of seconds, larger than the agents' ``[board]
  max_publish_interval`` (they publish at least that often).

Related options:

* ``unknown_host_policy``
"""),
    cfg.StrOpt("board_read_mode",
               default="follow",
               choices=[
                   ("follow", "Read the whole board once, then only what changes: an "
                              "etcd watch, or the SQLite rows changed since the last "
                              "read every refresh_interval (at most 0.5 s apart)."),
                   ("snapshot", "Re-read the whole board every refresh_interval (the "
                                "behaviour of earlier releases)."),
               ],
               help="""
How each scheduler process keeps its cache of the board. Requests never
wait for the board; they read the cache.

Related options:

* ``refresh_interval``
"""),
    cfg.FloatOpt("refresh_interval",
                 default=2.0, min=0.1, max=300.0,
                 help="""
Seconds between two reads of the board in the background: of the rows
changed since the last read (SQLite, ``board_read_mode = follow``), or of the
whole board (``snapshot``); also the wait before reconnecting after a board
error. An etcd board followed by watch delivers changes as they happen.

Possible values:

* A positive number of seconds. One etcd snapshot of 10,000 hosts costs
  about 0.2 s of the etcd server's time.

Related options:

* ``board_read_mode``
"""),
    cfg.FloatOpt("first_load_timeout",
                 default=3.0, min=0.0, max=60.0,
                 help="""
How long the first scheduling request waits, in seconds, for the first board
snapshot, so that it is not placed blind.

Possible values:

* A number of seconds; 0 means never wait.
"""),
]

placement_opts = [
    cfg.StrOpt("unknown_host_policy",
               default="last",
               choices=[
                   ("last", "A host with no fresh report passes the filter only when "
                            "no known-good host is left, and the weigher ranks it "
                            "below every known-good host and above every known-bad one."),
                   ("pass", "A host with no fresh report passes the filter and gets "
                            "the mean weight of the known hosts."),
                   ("fail", "A host with no fresh report fails the filter for requests "
                            "the filter concerns and gets the lowest weight."),
               ],
               help="""
What the filter and weigher do with a host that has no fresh, valid report
(no agent, the agent is down, the report is corrupt or older than
``max_age``), like nova's ``[metrics] weight_of_unavailable`` for missing
metrics. Requests without ``resex:`` placement keys are never affected.
With ``last``, list ResExCongestionFilter after the filters that check
resources, so that "a known-good host is left" means one that fits.

Related options:

* ``max_age``
"""),
    cfg.FloatOpt("congestion_threshold",
                 default=10.0, min=0.0,
                 help="""
Highest congestion index (expected latency inflation of a new
latency-sensitive instance, in percent) a host may have for a
latency-sensitive request whose flavor does not set
``resex:interference_threshold_pct``. A flavor that sets it uses its own
value: it is that instance's SLA.

The index is ``max(observed inflation, 100 x u / (1 - u))`` with ``u`` the
link utilisation a newcomer meets after the host's market has acted: the
untaxable load plus 0.15 of the taxable load (interferers the market can
cap). It is smoothed over ``admission_time_constant`` and latched with
``admission_hysteresis``. The default 10 refuses a host whose load is all
taxable from 60.6 % link utilisation, one whose load is all untaxable from
9.1 %.

Possible values:

* A non-negative number of percent.
* Overridden per aggregate by the metadata key ``resex_congestion_threshold``.
"""),
    cfg.StrOpt("topology_file",
               default=None,
               help="""
The links several hosts share (a rack's uplink, a spine), as a YAML file::

    links:
      - name: rack7-uplink
        capacity_gbps: 100
        share: 0.5
        hosts: [compute-0701, compute-0702]

A latency-sensitive request avoids a host whose shared links are congested
as it avoids a congested host: a link's congestion is that of an M/G/1-PS
link carrying the sum of its hosts' published port loads times its
``share`` (optional, 1 by default: an upper bound, traffic within the rack
counts too), compared with the same threshold. The
file is read again when it changes; a file that cannot be read or parsed is
logged at ERROR and the last good one (or none) is used. Read by the filter
and the weigher, and by resex-placement-sync (a host behind a congested
link gets ``CUSTOM_RESEX_CLOSED`` as the filter refuses it).

Possible values:

* Unset (default): no shared link is known, hosts are judged alone.
* A path to the topology file (doc/source/scheduler.rst, "Shared links").
"""),
    cfg.IntOpt("bulk_max_sensitive_vms",
               default=-1, min=-1,
               help="""
Largest number of latency-sensitive tenants a host may have for a heavy I/O
request (``resex:io_class=bulk``) to pass the filter.

Possible values:

* -1 (default): never filter bulk requests; the weigher still steers them
  to hosts with fewer latency-sensitive tenants.
* 0 or more: a hard limit.
* Overridden per aggregate by ``resex_bulk_max_sensitive_vms``.
"""),
    cfg.FloatOpt("weight_multiplier",
                 default=1.0,
                 help="""
Multiplier of the ResExCongestionWeigher's normalised weight.

For a latency-sensitive request the weigher prefers hosts with a lower
congestion index; for a bulk request, hosts with fewer latency-sensitive
tenants; other requests get the same weight everywhere.

Possible values:

* A number; 0 disables the weigher, a negative value inverts it.
* Overridden per aggregate by ``resex_weight_multiplier``.
"""),
]

admission_opts = [
    cfg.FloatOpt("admission_time_constant",
                 default=20.0, min=0.0, max=3600.0,
                 help="""
Time constant, in seconds, of the exponential moving average of each host's
congestion index that the filter and weigher use (driven by the reports'
timestamps, so independent of how often hosts publish).

Possible values:

* A number of seconds; 0 uses each report's index as is.

Related options:

* ``admission_hysteresis``, ``congestion_threshold``
"""),
    cfg.FloatOpt("admission_hysteresis",
                 default=0.3, min=0.0, max=0.9,
                 help="""
Relative width of the admission hysteresis. A host starts refusing a
latency-sensitive request when its smoothed index rises above the request's
threshold T, and admits again only once it has fallen to ``(1 - h) T``
(default: 7 % for T = 10 %). A steady host whose index wanders less than
that never flips.

Possible values:

* A fraction in [0, 0.9]; 0 disables the hysteresis.

Related options:

* ``admission_time_constant``, ``congestion_threshold``
"""),
    cfg.FloatOpt("weight_noise_floor",
                 default=1.0, min=0.0, max=100.0,
                 help="""
Congestion index differences, in percentage points, that the weigher
treats as noise: indices are rounded to multiples of this before weighing,
so two quiet hosts a fraction of a point apart weigh the same.

Possible values:

* A number of percentage points; 0 weighs every difference.
"""),
    cfg.ListOpt("strict_moves",
                default=[],
                item_type=cfg.types.String(choices=[
                    ("evacuate", "Evacuation (rebuild onto another host)."),
                    ("live_migrate", "Live migration without a forced host."),
                    ("cold_migrate", "Cold migration."),
                    ("resize", "Resize to another flavor."),
                    ("unshelve", "Unshelve of an offloaded instance."),
                ]),
                help="""
Moves of existing instances on which the filter is strict. By default a
move is advisory: the filter passes every host and the weigher still ranks
them, so that an evacuation or migration never fails because of a latency
preference. A destination the operator names (or forces) is never
second-guessed, strict or not, and a move whose kind cannot be read is
advisory.

Possible values:

* A comma-separated list of: evacuate, live_migrate, cold_migrate, resize,
  unshelve. Empty (default): every move is advisory.
"""),
]

ALL_OPTS = board_opts + placement_opts + admission_opts


def board_options(opts):
    """The board's keyword arguments of ``[resex]`` ``opts``: a reader's, never creating it."""
    return {"timeout": opts.board_timeout, "prefix": opts.etcd_prefix,
            "ca_cert": opts.board_ca_cert, "cert_cert": opts.board_cert_file,
            "cert_key": opts.board_key_file, "create": False}


def register_opts(conf):
    """Register the ``[resex]`` group and its options in ``conf`` (idempotent)."""
    conf.register_group(resex_group)
    conf.register_opts(ALL_OPTS, group=resex_group)


def list_opts():
    return [(resex_group, ALL_OPTS)]
