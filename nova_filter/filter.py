"""ResExCongestionFilter: keep latency-sensitive requests off congested hosts.

Nova 34 contract (``nova.scheduler.filters.BaseHostFilter``): ``host_passes``
is called per host per request and must be cheap: it does one dict lookup
in the cached board snapshot (:mod:`resex_libvirt.board.reader`), no I/O.
``filter_all`` is overridden only to classify the request once instead of
once per host. ``run_filter_once_per_request`` is True: the board cannot
change between the instances of one multi-create request, and nova passes
the hosts kept for the first instance on to the next. ``RUN_ON_REBUILD`` is
False: a rebuild stays on its host whatever the congestion.

Rules: :mod:`nova_filter.rules`. Missing, stale or corrupt reports never
raise: ``[resex] unknown_host_policy`` decides, with a debug line.

Enable it in nova.conf::

    [filter_scheduler]
    available_filters = nova.scheduler.filters.all_filters
    available_filters = nova_filter.filter.ResExCongestionFilter
    enabled_filters = ...,ResExCongestionFilter
"""

import logging
import time

import nova.conf
from nova.scheduler import filters
from nova.scheduler import utils as scheduler_utils

from nova_filter import conf as conf_mod
from nova_filter import rules

LOG = logging.getLogger(__name__)

CONF = nova.conf.CONF
conf_mod.register_opts(CONF)


class ResExCongestionFilter(filters.BaseHostFilter):
    """Hosts whose congestion would break the request's latency SLA fail."""

    RUN_ON_REBUILD = False
    run_filter_once_per_request = True

    def filter_all(self, filter_obj_list, spec_obj):
        if not self.RUN_ON_REBUILD and scheduler_utils.request_is_rebuild(spec_obj):
            return list(filter_obj_list)
        request = rules.classify(spec_obj)
        if request.kind is None:
            return list(filter_obj_list)
        check = self._checker(request)
        return [host for host in filter_obj_list if check(host)]

    def host_passes(self, host_state, spec_obj):
        request = rules.classify(spec_obj)
        if request.kind is None:
            return True
        return self._checker(request)(host_state)

    def _checker(self, request):
        """A ``host_state -> bool`` for ``request``, with the options read once."""
        opts = CONF.resex
        reader = rules.board_reader(CONF)
        now = time.time()
        unknown_passes = opts.unknown_host_policy == "pass"
        default_threshold = opts.congestion_threshold
        default_bulk_max = opts.bulk_max_sensitive_vms

        def check(host_state):
            rec = reader.get(host_state.host, now)
            if rec is None:
                LOG.debug("ResEx: no fresh report for host %s; unknown_host_policy=%s",
                          host_state.host, opts.unknown_host_policy)
                return unknown_passes
            if request.kind == rules.SENSITIVE:
                limit = request.threshold_pct
                if limit is None:
                    limit = rules.aggregate_value(host_state, "congestion_threshold",
                                                  default_threshold, float)
                index = rec.congestion_index
                if index > limit:
                    LOG.debug("ResEx: host %s fails: congestion index %.1f%% > %.1f%%",
                              host_state.host, index, limit)
                    return False
                return True
            limit = rules.aggregate_value(host_state, "bulk_max_sensitive_vms",
                                          default_bulk_max, int)
            if 0 <= limit < rec.sensitive_vms:
                LOG.debug("ResEx: host %s fails a bulk request: %d sensitive tenants > %d",
                          host_state.host, rec.sensitive_vms, limit)
                return False
            return True

        return check
