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

"""Options of the latency intake: group ``[latency]``.

The intake (:mod:`resex_agent.intake`) takes latency reports from tenants'
applications (one virtio-serial channel per VM) and from probes on the host
(one root-only Unix socket). Reports are untrusted input that decides how
other tenants are throttled (paper Section VI-C), so every bound here is a
safety limit, not only a tuning knob. The wire format is documented in
``doc/source/latency.rst``.
"""

from oslo_config import cfg

GROUP = "latency"

OPTS = [
    cfg.StrOpt(
        "probe_socket_path",
        default="/run/resex/latency.sock",
        help="""
Path of the host probe socket: a Unix stream socket the agent creates with
mode 0600, on which probes running on the host (e.g. ``benchex client
--report-socket``) send latency reports naming a VM by its UUID. Its
permissions are the trust boundary; the agent also checks that the peer's
uid is root or its own (SO_PEERCRED).

Possible values:

* An absolute path in a directory owned by the agent's user and not writable
  by its group or others (the agent creates it 0755 if missing and refuses to
  start otherwise: whoever can write the directory can replace the socket)
* An empty string: no probe socket (per-VM channels only)

Related options:

* ``max_probe_clients``
"""),
    cfg.IntOpt(
        "max_message_bytes", default=512, min=64, max=65536,
        help="""
Longest report line accepted, in bytes, newline included. A longer line is
rejected without being buffered whole: the intake never holds more than this
many pending bytes per connection.

Possible values:

* 64 to 65536; a v1 report is under 160 bytes
"""),
    cfg.FloatOpt(
        "rate_limit_per_s", default=20.0, min=0.1, max=10000.0,
        help="""
Sustained reports per second accepted from one VM through one source (its
channel, or the probe socket): the token bucket's refill rate. Reports over
the limit are counted and dropped.

Related options:

* ``rate_burst``
"""),
    cfg.IntOpt(
        "rate_burst", default=40, min=1, max=100000,
        help="""
Reports one VM may send in a burst through one source: the token bucket's size.

Related options:

* ``rate_limit_per_s``
"""),
    cfg.IntOpt(
        "window_reports", default=16, min=1, max=4096,
        help="""
Reports kept per VM and source; the VM's latency window for the market is
pooled from the fresh ones among them.

Related options:

* ``freshness_s``
"""),
    cfg.FloatOpt(
        "freshness_s", default=3.0, min=0.01, max=3600.0,
        help="""
Age in seconds after which a report no longer counts: a VM that stops
reporting stops influencing the market (no interference, no throttling).

Possible values:

* A few agent epochs (the epoch is ``[agent] epoch_s``)
"""),
    cfg.FloatOpt(
        "plausible_max_us", default=10_000_000.0, min=1000.0, max=3_600_000_000.0,
        help="""
Largest latency, in microseconds, a report may claim (mean, standard
deviation or p99). Larger values are rejected as implausible.

Possible values:

* Default 10 s; a latency SLA (``resex:latency_sla_us``) above it makes no sense
"""),
    cfg.IntOpt(
        "max_samples_per_report", default=1_000_000, min=1, max=1_000_000_000,
        help="Largest sample count ``n`` one report may claim."),
    cfg.FloatOpt(
        "log_interval_s", default=60.0, min=0.0, max=86400.0,
        help="""
Each kind of rejection is logged at most once per this interval per VM, and
each VM's claimed latency at most once per this interval (0: every time).
Every rejection is counted regardless.
"""),
    cfg.FloatOpt(
        "channel_retry_s", default=2.0, min=0.05, max=600.0,
        help="""
Seconds between attempts to connect to a VM's channel socket that is not
there yet or refused the connection (QEMU binds it when the VM starts).
"""),
    cfg.IntOpt(
        "max_probe_clients", default=32, min=1, max=4096,
        help="""
Concurrent connections held on the probe socket. When they are all taken, a
new connection evicts the one that has gone longest without a complete
report, so idle or slow connections can never lock an honest probe out.

Related options:

* ``probe_socket_path``, ``probe_idle_timeout_s``, ``probe_line_timeout_s``
"""),
    cfg.FloatOpt(
        "probe_idle_timeout_s", default=60.0, min=0.1, max=86400.0,
        help="""
A probe connection that sends no complete report for this many seconds is
closed (the probe reconnects when it has something to say).

Possible values:

* 0.1 to 86400 seconds; above the slowest probe's report period

Related options:

* ``probe_line_timeout_s``, ``max_probe_clients``
"""),
    cfg.FloatOpt(
        "probe_line_timeout_s", default=5.0, min=0.1, max=3600.0,
        help="""
A probe connection that leaves a report line unfinished for this many
seconds is closed (a report is one short line written at once; a half line
that stays is a slow client or a slow-loris attack).

Possible values:

* 0.1 to 3600 seconds

Related options:

* ``probe_idle_timeout_s``, ``max_probe_clients``
"""),
    cfg.FloatOpt(
        "status_interval_s", default=1.0, min=0.0, max=3600.0, mutable=True,
        help="""
Shortest time in seconds between two status lines the agent writes back down
a VM's latency channel: whether its last latency window met its SLA, the
window, the SLA and, for a capped VM, its cap, limit and a reason category.
A line is written when the VM's status changed (and every few seconds
anyway, for a guest that starts reading late), never more often than this.
The line names no other VM, host or project. A guest that does not read
costs nothing: a line that would block is dropped and counted
(``resex_latency_status_dropped_total``).

Possible values:

* 0: write no status (the channel is read only, as before)
* A positive number of seconds; the default, 1, is about one line per
  second per VM with a channel

Mutable: applied on SIGHUP, from the next interval.
"""),
]


def register_opts(conf):
    conf.register_opts(OPTS, group=GROUP)


def list_opts():
    return [(GROUP, OPTS)]
