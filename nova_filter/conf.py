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
Timeout of every board call, in seconds (etcd HTTP calls; SQLite busy wait).

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
    cfg.FloatOpt("refresh_interval",
                 default=2.0, min=0.1, max=300.0,
                 help="""
How often, in seconds, the scheduler re-reads the whole board in the
background. Requests never wait for the board; they use the last snapshot.

Possible values:

* A positive number of seconds. One etcd snapshot of 10,000 hosts costs
  about 0.2 s of the etcd server's time.
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
               default="pass",
               choices=[
                   ("pass", "A host with no fresh report passes the filter and gets "
                            "the mean weight of the known hosts."),
                   ("fail", "A host with no fresh report fails the filter for requests "
                            "the filter concerns and gets the lowest weight."),
               ],
               help="""
What the filter and weigher do with a host that has no fresh, valid report
(no agent, the agent is down, the report is corrupt or older than
``max_age``). Requests without ``resex:`` placement keys are never affected.

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
host's link utilisation (processor-sharing slowdown): 10 admits hosts up to
about 9 % link utilisation, 50 up to 33 %, 100 up to 50 %.

Possible values:

* A non-negative number of percent.
* Overridden per aggregate by the metadata key ``resex_congestion_threshold``.
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

ALL_OPTS = board_opts + placement_opts


def register_opts(conf):
    """Register the ``[resex]`` group and its options in ``conf`` (idempotent)."""
    conf.register_group(resex_group)
    conf.register_opts(ALL_OPTS, group=resex_group)


def list_opts():
    return [(resex_group, ALL_OPTS)]
