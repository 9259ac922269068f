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

"""Options of the libvirt hypervisor: groups ``[libvirt]`` and ``[sla]``.

``[libvirt]`` says which libvirt the agent controls and how it reacts to it
going away; ``[sla]`` holds the configured defaults of every ``resex:`` key
(:data:`resex_libvirt.sla.KEYS`), the lowest layer under Nova flavor extra
specs and the domain's own metadata. The metadata namespace is fixed
(``http://resex-libvirt.org/xmlns/sla/1.0``), not an option.
"""

from oslo_config import cfg

from resex_libvirt import sla as sla_mod

GROUP = "libvirt"
SLA_GROUP = "sla"

libvirt_group = cfg.OptGroup(
    GROUP, title="libvirt hypervisor",
    help="The libvirt daemon whose VMs the agent samples and caps "
         "(used when ``[agent] host_driver = libvirt``).")
sla_group = cfg.OptGroup(
    SLA_GROUP, title="Default SLA",
    help="The SLA and mClock controls of a VM that says nothing about them in its "
         "libvirt metadata or Nova flavor extra specs.")

LIBVIRT_OPTS = [
    cfg.StrOpt(
        "connection_uri",
        default="qemu:///system",
        help="""
libvirt connection URI of the hypervisor on this host.

Possible values:

* ``qemu:///system``: QEMU/KVM (caps through cgroup ``global_quota``, weight
  through ``cpu_shares``)
* ``xen:///system``: Xen through libxl (credit scheduler ``cap``/``weight``)
* ``test:///default`` or ``test:///ABS/PATH/node.xml``: libvirt's test driver
  (monitor-only: sampled, never actuated)

Related options:

* ``[agent] host_driver``
"""),
    cfg.FloatOpt(
        "reconnect_backoff_min",
        default=1.0, min=0.01, max=3600.0,
        help="""
Seconds to wait before the second attempt to reopen a lost libvirt connection.

The first reopen is immediate; each failed one doubles the wait up to
``reconnect_backoff_max``. The loop never sleeps on it: while waiting, VMs
keep their knobs and the loop holds.

Related options:

* ``reconnect_backoff_max``
"""),
    cfg.FloatOpt(
        "reconnect_backoff_max",
        default=60.0, min=0.01, max=3600.0,
        help="""
Longest wait (seconds) between two attempts to reopen the libvirt connection.

Must be >= ``reconnect_backoff_min``.

Related options:

* ``reconnect_backoff_min``
"""),
    cfg.IntOpt(
        "qemu_cap_period_us",
        default=10000, min=1000, max=1000000,
        help="""
CFS period, in microseconds, that QEMU/KVM caps are written with
(``global_period``; the cap is ``global_quota`` = period x cap / 100).

A capped VM runs its share of every period in one slot, so the period is
the length of its bursts: a VMM-bypass sender posts a whole burst of I/O in
its slot, which the latency-sensitive neighbours then queue behind. The
default is Xen's credit-scheduler slice, the paper's setting (10 ms). In
the lab (doc/source/lab.rst) 10 ms gave a larger p99 cut with more of the
interferer's throughput kept than the kernel's 100 ms, with caps as exact
(mean error 0.02 pp). Caps whose quota would fall under 1000 us lengthen
the period for that VM.

Possible values:

* 10000 (10 ms): Xen's slice, as in the paper (default)
* 100000 (100 ms): the kernel's default period
* any period between 1000 and 1000000

Related options:

* ``[agent] deadband_pct``
"""),
    cfg.StrOpt(
        "latency_channel_hotplug",
        default="sensitive",
        choices=[
            ("sensitive", "VMs with a latency SLA (resex:latency_sla_us)"),
            ("all", "every running VM"),
            ("none", "never: only channels already in the domain XML are used"),
        ],
        help="""
Which running VMs get the ``org.resex.latency.0`` virtio-serial channel
hot-plugged into their live domain (never into the persistent definition),
at start and again after every lifecycle event that loses it (reboot, start,
resize, migration, unshelve, evacuation, rescue).

A VM needs a virtio-serial controller for it: Nova adds one only for images
with ``hw_qemu_guest_agent=yes``. A VM without one is logged once, shown by
``resex-agent --check`` and runs without latency feedback.

Possible values:

* ``sensitive`` (default), ``all``, ``none``

Related options:

* ``[latency]`` (the intake that reads the channels)
"""),
    cfg.BoolOpt(
        "events",
        default=True,
        help="""
Use libvirt domain events (lifecycle, metadata change, tunables, device
removal) and keepalive.

With events the list of running VMs follows the events (one domain listing
every ``metadata_refresh_interval`` as a safety net), a VM is re-read as soon
as it changes, its latency channel is re-attached at once after a reboot and
a dead libvirtd is noticed between calls; without, the domains are listed
every control interval and other changes are seen within
``metadata_refresh_interval``.

Related options:

* ``metadata_refresh_interval``
"""),
    cfg.FloatOpt(
        "metadata_refresh_interval",
        default=60.0, min=1.0, max=86400.0,
        help="""
Seconds after which the running domains are listed and each VM's domain XML
(SLA metadata, Nova's flavor, devices) and scheduler parameters are read again
even without an event.

Related options:

* ``events``
"""),
]


def _key_opt(key, opt_cls, name, **kwargs):
    help_text = """
Default ``%s`` of a VM whose metadata and flavor do not set it.

%s

Possible values:

* %s

Related options:

* ``[nova] sla_lookup`` (flavor extra specs override this)
""" % (key.name, key.description, _range(key))
    if key.min is not None and opt_cls is not cfg.StrOpt:
        kwargs["min"] = key.min
    if key.max is not None and opt_cls is not cfg.StrOpt:
        kwargs["max"] = key.max
    return opt_cls(name, default=key.default, help=help_text, **kwargs)


def _range(key):
    if key.choices:
        return "one of: %s" % ", ".join(key.choices)
    low = "%g" % key.min if key.min is not None else "-inf"
    high = "%g" % key.max if key.max is not None else "inf"
    extra = "" if key.default is not None else "; unset: none"
    return "%s %s..%s%s" % ("an integer" if key.type is int else "a number", low, high, extra)


SLA_OPTS = [
    _key_opt(sla_mod.LATENCY_SLA_US, cfg.FloatOpt, "latency_sla_us"),
    _key_opt(sla_mod.INTERFERENCE_THRESHOLD_PCT, cfg.FloatOpt, "interference_threshold_pct"),
    _key_opt(sla_mod.CPU_RESERVATION_PCT, cfg.FloatOpt, "cpu_reservation_pct"),
    _key_opt(sla_mod.CPU_LIMIT_PCT, cfg.FloatOpt, "cpu_limit_pct"),
    _key_opt(sla_mod.SHARES, cfg.IntOpt, "shares"),
    _key_opt(sla_mod.IO_CLASS, cfg.StrOpt, "io_class",
             choices=list(sla_mod.IO_CLASSES)),
    _key_opt(sla_mod.LATENCY_STATISTIC, cfg.StrOpt, "latency_statistic",
             choices=list(sla_mod.STATISTICS)),
]

#: ``[sla]`` option name -> ``resex:`` key.
SLA_KEY_OF_OPT = {
    "latency_sla_us": sla_mod.LATENCY_SLA_US.name,
    "interference_threshold_pct": sla_mod.INTERFERENCE_THRESHOLD_PCT.name,
    "cpu_reservation_pct": sla_mod.CPU_RESERVATION_PCT.name,
    "cpu_limit_pct": sla_mod.CPU_LIMIT_PCT.name,
    "shares": sla_mod.SHARES.name,
    "io_class": sla_mod.IO_CLASS.name,
    "latency_statistic": sla_mod.LATENCY_STATISTIC.name,
}


def _fresh(group):
    # oslo.config keeps overrides on the OptGroup object: a private copy per
    # ConfigOpts keeps two configurations (or two tests) from sharing them.
    return cfg.OptGroup(group.name, title=group.title, help=group.help)


def register_opts(conf):
    conf.register_group(_fresh(libvirt_group))
    conf.register_opts(LIBVIRT_OPTS, group=GROUP)
    conf.register_group(_fresh(sla_group))
    conf.register_opts(SLA_OPTS, group=SLA_GROUP)


def list_opts():
    return [(libvirt_group, LIBVIRT_OPTS), (sla_group, SLA_OPTS)]
