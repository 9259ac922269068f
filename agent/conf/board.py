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

"""Options of the price board the agent publishes to: group ``[board]``.

The default URL is the fixed path ``sqlite:///var/lib/resex/board.sqlite``
rather than a path under ``[agent] state_dir``: the board is shared with
another program (nova-scheduler's ``[resex] board_url`` on an all-in-one
host), so both sides must name it without reading each other's
configuration, and ``/var/lib/resex`` is where the devstack plugin and the
packaged unit put the agent's state anyway.
"""

from oslo_config import cfg

from resex_libvirt.board import publish_policy as policy_mod

GROUP = "board"

OPTS = [
    cfg.StrOpt(
        "url",
        default="sqlite:///var/lib/resex/board.sqlite",
        help="""
Where the agent publishes its host report every epoch.

Possible values:

* ``sqlite:///absolute/path``: a SQLite file (WAL mode), for an all-in-one
  host where nova-scheduler reads the same file. The URL's path is the
  file's absolute path.
* ``etcd3+http://host:port`` or ``etcd3+https://host:port``: an etcd v3
  cluster, for a fleet (devstack runs etcd on the controller, port 2379).
  Name every member of a cluster, comma-separated
  (``etcd3+http://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379``; port 2379
  when left out, IPv6 addresses in brackets): a call that a member cannot
  serve (down, silent, no leader) goes to the next one.
* An empty string: do not publish.

Related options:

* nova.conf ``[resex] board_url`` must name the same board.
* ``etcd_prefix``, ``lease_ttl``, ``timeout``
"""),
    cfg.StrOpt(
        "etcd_prefix",
        default="/resex/board/",
        help="""
Key prefix of the host reports in etcd; the host's key is the prefix
followed by ``[agent] host``.

Related options:

* nova.conf ``[resex] etcd_prefix`` must be the same.
"""),
    cfg.IntOpt(
        "lease_ttl",
        default=120,
        min=5,
        max=86400,
        help="""
TTL, in seconds, of the etcd lease the host's key is attached to: the key
disappears this long after the agent stops refreshing it (garbage
collection of dead or decommissioned hosts). The agent refreshes the lease
when it publishes; on the SQLite board, rows whose report is older than this
are deleted instead.

Possible values:

* A number of seconds larger than ``max_publish_interval`` (several times
  larger, so one missed publish does not drop the host).

Related options:

* ``max_publish_interval``
"""),
    cfg.FloatOpt(
        "timeout",
        default=2.0,
        min=0.05,
        max=60.0,
        help="""
Timeout, in seconds, of every board call (on etcd the whole call: with
several members in ``url`` each member tried gets a share of it; the SQLite
busy wait). A publish that times out is skipped, logged, and retried at the
next epoch: the control loop never waits longer than this for the board.
"""),
    cfg.StrOpt(
        "ca_cert",
        help="""
CA bundle that verifies an ``etcd3+https`` board's certificate; unset: the
system's CA store.
"""),
    cfg.StrOpt(
        "cert_file",
        help="""
Client certificate for an ``etcd3+https`` board (with ``key_file``).
"""),
    cfg.StrOpt(
        "key_file",
        help="""
Private key of ``cert_file``.
"""),
    cfg.IntOpt(
        "publish_on_change_fleet_size",
        default=200,
        min=0,
        help="""
Fleet size (hosts with a report on the board) from which the agent publishes
only when its report changed meaningfully, or after
``max_publish_interval``, instead of every epoch. Each etcd write costs a
revision (about 414 bytes until compaction) and each scheduler snapshot
grows with the fleet.

Possible values:

* 0: always publish every epoch.
* A number of hosts.

Related options:

* ``max_publish_interval``, ``min_utilisation_delta``, ``min_index_delta_pct``,
  ``min_price_rel_delta``
"""),
    cfg.FloatOpt(
        "max_publish_interval",
        default=20.0,
        min=1.0,
        max=3600.0,
        help="""
Longest time, in seconds, between two publishes when publishing on change.

Related options:

* nova.conf ``[resex] max_age`` must be larger (default 60 s).
* ``lease_ttl`` must be larger.
"""),
    cfg.FloatOpt(
        "min_utilisation_delta",
        default=0.05,
        min=0.0,
        max=1.0,
        help="""
A change of the link utilisation (fraction of capacity) at least this large
is published at once when publishing on change.
"""),
    cfg.FloatOpt(
        "min_index_delta_pct",
        default=5.0,
        min=0.0,
        help="""
A change of the congestion index (percentage points of expected latency
inflation) at least this large is published at once when publishing on change.
"""),
    cfg.FloatOpt(
        "min_price_rel_delta",
        default=0.10,
        min=0.0,
        help="""
A relative change of the CPU or I/O price larger than this (0.1 = 10 %) is
published at once when publishing on change. A change in the number of
latency-sensitive or heavy I/O VMs is always published at once.
"""),
]


def register_opts(conf):
    conf.register_opts(OPTS, group=GROUP)


def list_opts():
    return [(GROUP, OPTS)]


def board_options(conf):
    """Keyword options of :func:`resex_libvirt.board.open_board` from ``conf.board``."""
    b = conf.board
    return {"timeout": b.timeout, "prefix": b.etcd_prefix, "lease_ttl": b.lease_ttl,
            "ttl": float(b.lease_ttl), "ca_cert": b.ca_cert, "cert_cert": b.cert_file,
            "cert_key": b.key_file}


def publish_policy(conf):
    """The agent's :class:`~resex_libvirt.board.publish_policy.PublishPolicy` of ``conf``."""
    b = conf.board
    return policy_mod.PublishPolicy(
        on_change_fleet_size=b.publish_on_change_fleet_size,
        max_interval_s=b.max_publish_interval,
        min_utilisation_delta=b.min_utilisation_delta,
        min_index_delta_pct=b.min_index_delta_pct,
        min_price_rel_delta=b.min_price_rel_delta)
