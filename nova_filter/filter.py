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

"""ResExCongestionFilter: keep latency-sensitive requests off congested hosts.

Nova 34 contract (``nova.scheduler.filters.BaseHostFilter``): ``filter_all``
is overridden because the rule for unknown hosts needs the whole list (an
unknown host passes only when no known-good host is left) and to classify
the request once; it does one dict lookup per host in the scheduler's cache
of the board (:mod:`resex_libvirt.board.reader`), no I/O.
``run_filter_once_per_request`` is True: the board cannot change between the
instances of one multi-create request, and nova passes the hosts kept for
the first instance on to the next. ``RUN_ON_REBUILD`` is False: a rebuild
stays on its host whatever the congestion.

The rule (:mod:`resex_nova.rules`), for a latency-sensitive request with
threshold T (its flavor's ``resex:interference_threshold_pct``, else the
aggregate's or ``[resex] congestion_threshold``, default 10 %): a host is
*known-bad* while its admission value is above T. The admission value is
the host's congestion index, counting taxable load (interferers the host's
market can cap) at 0.15 of itself
(:func:`resex_libvirt.board.report.congestion_index`), smoothed with time
constant ``[resex] admission_time_constant`` (20 s) and latched with
hysteresis ``[resex] admission_hysteresis`` (0.3): a host starts refusing
when the smoothed index passes T and admits again below 0.7 T
(:mod:`resex_libvirt.board.admission`), so a steady host does not flip. A
default host refuses from 60.6 % link utilisation when its load is all
taxable, from 9.1 % when none of it is.

Hosts without a fresh report follow ``[resex] unknown_host_policy``
(default ``last``: they pass only when no known-good host is left).

**A flavor whose keys contradict each other fails every host** for a new
instance, with a WARNING naming the flavor and the reason: a
``resex:cpu_limit_pct`` below its ``resex:cpu_reservation_pct``. nova-api
cannot refuse it (its extra-spec validators see one key at a time, and
``openstack flavor set`` may send the two keys in separate calls), and the
agent would run such a VM without its limit. A move or rebuild of an
existing instance is not blocked for it (only logged).

**Moves are advisory** (:mod:`resex_nova.moves`): for an evacuation, a live
or cold migration, a resize or an unshelve the filter passes every host (the
weigher still ranks them) unless the move's kind is in ``[resex]
strict_moves``; a destination the operator named or forced always passes.

Enable it in nova.conf (last, so that "left" means "fits")::

    [filter_scheduler]
    available_filters = nova.scheduler.filters.all_filters
    available_filters = resex_nova.filter.ResExCongestionFilter
    enabled_filters = ...,ResExCongestionFilter
"""

import logging
import threading
import time

import nova.conf
from nova.scheduler import filters
from nova.scheduler import utils as scheduler_utils

from resex_libvirt import board as board_mod
from resex_nova import conf as conf_mod
from resex_nova import moves
from resex_nova import rules

LOG = logging.getLogger(__name__)

CONF = nova.conf.CONF
conf_mod.register_opts(CONF)

#: Seconds between two WARNING lines about board records the reader dropped.
REJECTED_LOG_INTERVAL = 300.0


class RejectedRecords:
    """Says at WARNING, at most once per ``interval``, how many board records were dropped.

    A dropped record (invalid, or naming another host than its key) leaves its
    host without a report, and the request sees it as unknown. The decoder
    names each bad key once, in the board's logger; this line, in the
    filter's, tells whoever reads the scheduler's log how many were dropped
    since its last line, and why, without one line per request.
    """

    def __init__(self, interval=REJECTED_LOG_INTERVAL):
        self.interval = interval
        self._lock = threading.Lock()
        self._reader = None
        self._counts = {}
        self._quiet_until = float("-inf")

    def check(self, reader, now):
        """Log the records ``reader`` dropped since the last line, unless one was recent."""
        if now < self._quiet_until and reader is self._reader:
            return
        if not self._lock.acquire(blocking=False):
            return  # another request is saying it
        try:
            counts = reader.rejected
            base = self._counts if reader is self._reader else {}
            # A board opened again counts from zero: what it holds is new.
            new = {reason: n - base.get(reason, 0) if n >= base.get(reason, 0) else n
                   for reason, n in counts.items()}
            self._reader, self._counts = reader, counts
            if not any(new.values()):
                return
            self._quiet_until = now + self.interval
            LOG.warning("ResEx: %d record(s) of the price board %s dropped by the scheduler "
                        "(%s); their hosts have no report (unknown_host_policy applies); "
                        "the board's log names each key, resex-board counts them",
                        sum(new.values()), board_mod.redact(reader.url),
                        ", ".join("%s %d" % (r, n) for r, n in sorted(new.items()) if n))
        finally:
            self._lock.release()


#: One per scheduler process, whatever number of filter objects nova makes.
REJECTED = RejectedRecords()


def _flavor_name(spec_obj):
    """The request's flavor's name (or id) for a log line, ``None`` when it has neither."""
    flavor = spec_obj.flavor
    for field in ("name", "flavorid"):
        if flavor.obj_attr_is_set(field):
            return getattr(flavor, field)
    return None


class ResExCongestionFilter(filters.BaseHostFilter):
    """Hosts whose congestion would break the request's latency SLA fail."""

    RUN_ON_REBUILD = False
    run_filter_once_per_request = True

    def _advisory(self, spec_obj):
        """True when ``spec_obj`` is a move this filter must not block."""
        move = moves.detect(spec_obj)
        if move is None:
            return False
        if moves.named_destination(spec_obj):
            LOG.debug("ResEx: %s to a named destination: not filtered", move)
            return True
        if move in CONF.resex.strict_moves:
            return False
        LOG.debug("ResEx: %s of instance %s: advisory, every host passes", move,
                  getattr(spec_obj, "instance_uuid", None))
        return True

    def filter_all(self, filter_obj_list, spec_obj):
        hosts = list(filter_obj_list)
        if not self.RUN_ON_REBUILD and scheduler_utils.request_is_rebuild(spec_obj):
            return hosts
        request = rules.classify(spec_obj)
        if request.refused is not None and hosts and self._refuse(request, spec_obj):
            return []
        if request.kind is None or not hosts or self._advisory(spec_obj):
            return hosts
        judge = rules.Judge(request, CONF, time.time())
        REJECTED.check(judge.reader, judge.now)
        policy = CONF.resex.unknown_host_policy
        verdicts, entries, limits = judge.scan(hosts)
        if LOG.isEnabledFor(logging.DEBUG):
            for host, verdict, entry, limit in zip(hosts, verdicts, entries, limits):
                self._log(request, host, verdict, entry, limit, policy)
        if policy == "last" and rules.GOOD not in verdicts:
            keep = (rules.UNKNOWN,)
        elif policy == "fail":
            keep = (rules.GOOD,)
        else:
            keep = (rules.GOOD,) if policy == "last" else (rules.GOOD, rules.UNKNOWN)
        return [host for host, v in zip(hosts, verdicts) if v in keep]

    @staticmethod
    def _refuse(request, spec_obj):
        """Log why the flavor is refused; True for a new instance, False for a move."""
        flavor = _flavor_name(spec_obj)
        instance = getattr(spec_obj, "instance_uuid", None)
        move = moves.detect(spec_obj)
        if move is not None:
            LOG.warning("ResEx: flavor %s of instance %s contradicts itself (%s); its %s is "
                        "not blocked for it", flavor, instance, request.refused, move)
            return False
        LOG.warning("ResEx: flavor %s refused for instance %s: %s; every host fails until "
                    "the flavor's extra specs are fixed", flavor, instance, request.refused)
        return True

    @staticmethod
    def _log(request, host_state, verdict, entry, limit, policy):
        if verdict == rules.UNKNOWN:
            LOG.debug("ResEx: %s for host %s; unknown_host_policy=%s",
                      "a blind report (its agent cannot see the hypervisor)"
                      if entry is not None and entry.blind else "no fresh report",
                      host_state.host, policy)
        elif verdict == rules.BAD:
            if request.kind == rules.SENSITIVE and entry.link is not None:
                ld = entry.link
                LOG.debug("ResEx: host %s fails: its shared link %s at %.0f%% of capacity "
                          "(%d of %d hosts heard) gives %.1f%% > %.1f%%", host_state.host,
                          ld.link.name, 100.0 * ld.utilisation, ld.heard, ld.hosts,
                          entry.latched, limit)
            elif request.kind == rules.SENSITIVE:
                LOG.debug("ResEx: host %s fails: admission index %.1f%% > %.1f%%",
                          host_state.host, entry.latched, limit)
            else:
                LOG.debug("ResEx: host %s fails a bulk request: %d sensitive tenants > %d",
                          host_state.host, entry.report.sensitive_vms, limit)

    def host_passes(self, host_state, spec_obj):
        """One host alone (nova calls :meth:`filter_all`): unknown passes unless ``fail``."""
        return bool(self.filter_all([host_state], spec_obj))
