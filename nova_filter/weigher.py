"""ResExCongestionWeigher: prefer quiet hosts for sensitive requests, and hosts
without sensitive tenants for bulk ones.

Nova 34 contract (``nova.scheduler.weights.BaseHostWeigher``): the raw
weights are normalised by nova's ``HostWeightHandler`` (min-max over the
candidate hosts), then multiplied by :meth:`weight_multiplier`, which reads
``[resex] weight_multiplier`` through ``nova.scheduler.utils.get_weight_multiplier``
(aggregate metadata ``resex_weight_multiplier`` overrides it).

Raw weights, all in (0, 1], higher wins:

* sensitive request: ``100 / (100 + CI)`` with CI the host's congestion
  index in percent, i.e. ``1 - rho`` under the processor-sharing model: the
  fraction of the link's speed a newcomer can expect;
* bulk request: ``1 / (1 + sensitive_vms)``;
* other requests: 0 everywhere (nova normalises equal weights to 0: no effect).

A host without a fresh report gets, under ``unknown_host_policy=pass``, the
mean raw weight of the known hosts (neutral: it neither wins nor loses
against the fleet), and under ``fail`` 0, below every known host.
``weigh_objects`` is overridden for that mean and to classify the request
once per request instead of once per host.
"""

import logging
import time

import nova.conf
from nova.scheduler import utils as scheduler_utils
from nova.scheduler import weights

from nova_filter import conf as conf_mod
from nova_filter import rules

LOG = logging.getLogger(__name__)

CONF = nova.conf.CONF
conf_mod.register_opts(CONF)

#: The raw weight of a host nothing is known about, weighed alone.
NEUTRAL = 0.5


def _raw(request, rec):
    if request.kind == rules.SENSITIVE:
        return 100.0 / (100.0 + rec.congestion_index)
    return 1.0 / (1.0 + rec.sensitive_vms)


class ResExCongestionWeigher(weights.BaseHostWeigher):
    """Weighs hosts by the congestion a request would meet there."""

    def weight_multiplier(self, host_state):
        return scheduler_utils.get_weight_multiplier(
            host_state, conf_mod.AGGREGATE_KEYS["weight_multiplier"],
            CONF.resex.weight_multiplier)

    def _weigh_object(self, host_state, weight_properties):
        request = rules.classify(weight_properties)
        if request.kind is None:
            return 0.0
        rec = rules.board_reader(CONF).get(host_state.host)
        if rec is None:
            return NEUTRAL if CONF.resex.unknown_host_policy == "pass" else 0.0
        return _raw(request, rec)

    def weigh_objects(self, weighed_obj_list, weight_properties):
        request = rules.classify(weight_properties)
        if request.kind is None:
            return [0.0] * len(weighed_obj_list)
        reader = rules.board_reader(CONF)
        now = time.time()
        raws = []
        for obj in weighed_obj_list:
            rec = reader.get(obj.obj.host, now)
            if rec is None:
                LOG.debug("ResEx: no fresh report for host %s; unknown_host_policy=%s",
                          obj.obj.host, CONF.resex.unknown_host_policy)
                raws.append(None)
            else:
                raws.append(_raw(request, rec))
        known = [w for w in raws if w is not None]
        if CONF.resex.unknown_host_policy == "pass":
            unknown = (sum(known) / len(known)) if known else NEUTRAL
        else:
            unknown = 0.0
        return [unknown if w is None else w for w in raws]
