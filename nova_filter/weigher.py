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

"""ResExCongestionWeigher: prefer quiet hosts for sensitive requests, and hosts
without sensitive tenants for bulk ones.

Nova 34 contract (``nova.scheduler.weights.BaseHostWeigher``): nova's
``HostWeightHandler`` normalises the raw weights, then multiplies them by
:meth:`weight_multiplier` (``[resex] weight_multiplier``; aggregate
metadata ``resex_weight_multiplier`` overrides it, read like nova's
``get_weight_multiplier``). The raw weights here are already in a fixed
range, ``minval = 0`` and ``maxval = 1``, so nova does not stretch them
over the candidates (a 0.1 point difference between two quiet hosts stays a
0.1 point difference, and below ``[resex] weight_noise_floor`` none).

Raw weights, in three bands so that the order is always known-good hosts,
then unknown ones, then known-bad ones (as nova's MetricsWeigher places
hosts with missing metrics by ``weight_of_unavailable``):

* **known-good** (the filter would pass it), in [0.6, 1.0]: for a sensitive
  request with threshold T, ``1 - 0.4 q / T`` with ``q`` the host's
  admission value (:mod:`resex_libvirt.board.admission`) rounded to the
  noise floor: the share of the SLA's headroom left; for a bulk request
  ``0.6 + 0.4 / s`` with ``s = (1 + n) (1 + 0.5 h / (1 + h))``, ``n`` the
  sensitive and ``h`` the heavy I/O tenants on the host
  (a bulk tenant avoids sensitive tenants first, then other bulk ones);
  with ``[resex] topology_file`` set, ``s`` is also multiplied by ``1 + u``,
  ``u`` the load (0-1) of the most loaded shared link the host sends into:
  a bulk tenant goes where its traffic's uplink has room;
* **unknown** (no fresh report): 0.5 under ``unknown_host_policy = last``;
  the mean weight of the known candidates under ``pass``; 0 under ``fail``;
* **known-bad**, in [0, 0.4): ``0.4 T / q`` (sensitive),
  ``0.4 / s`` (bulk). A move, which the filter does not
  block, still goes to the best of them.

Other requests get 0 everywhere (no effect).

A sensitive request for a member of a server group (an ensemble: its
``RequestSpec.instance_group.hosts``), with ``[resex] topology_file`` set:
a known-good host weighs at most ``1 - 0.4 p / T``, ``p`` the congestion of
the most congested shared link between it and the group's hosts
(:func:`~resex_libvirt.board.links.toward`: the links a group host sends
into and the candidate does not), within the good band: among the hosts
that fit, those whose path to the group is clean come first (a host of the
group's own rack crosses no uplink to it).

Fast path: the request is classified, the options and the multiplier read
once per request (in :meth:`weigh_objects`); :meth:`weight_multiplier`,
which nova calls per host, answers from that unless the host is in an
aggregate.
"""

import logging
import time

import nova.conf
from nova.scheduler import utils as scheduler_utils
from nova.scheduler import weights

from resex_libvirt.board import links as links_mod
from resex_nova import conf as conf_mod
from resex_nova import rules

LOG = logging.getLogger(__name__)

CONF = nova.conf.CONF
conf_mod.register_opts(CONF)

#: The bands of the raw weight.
GOOD_MIN = 0.6
UNKNOWN = 0.5
BAD_MAX = 0.4

#: How much the heavy I/O tenants already on a host count against a bulk
#: request, at most (any number of them counts less than one sensitive
#: tenant): bulk tenants spread over the links instead of piling onto the
#: hosts that have no sensitive tenant.
BULK_SPREAD = 0.5

#: Kept for callers of earlier releases: the weight of an unknown host.
NEUTRAL = UNKNOWN


def _rounded(value, floor):
    return round(value / floor) * floor if floor > 0.0 else value


def raw_weight(request, verdict, entry, limit, noise_floor, link_utilisation=0.0):
    """The raw weight of a known host (``verdict`` GOOD or BAD), see the module docstring.

    ``link_utilisation``: for a bulk request, the load (0-1) of the most
    loaded shared link the host sends into (0 without a topology).
    """
    if request.kind == rules.SENSITIVE:
        q = _rounded(entry.latched, noise_floor)
        if verdict == rules.GOOD:
            if limit <= 0.0:
                return 1.0
            return max(GOOD_MIN, 1.0 - (1.0 - GOOD_MIN) * q / limit)
        return BAD_MAX * min(1.0, max(limit, 1e-9) / max(q, 1e-9)) * (1.0 - 1e-9)
    heavy = entry.heavy_io_vms
    spread = ((1.0 + entry.sensitive_vms) * (1.0 + BULK_SPREAD * heavy / (1.0 + heavy))
              * (1.0 + min(1.0, max(0.0, link_utilisation))))
    if verdict == rules.GOOD:
        return GOOD_MIN + (1.0 - GOOD_MIN) / spread
    return BAD_MAX / spread


class ResExCongestionWeigher(weights.BaseHostWeigher):
    """Weighs hosts by the congestion a request would meet there."""

    minval = 0.0
    maxval = 1.0

    def __init__(self):
        super().__init__()
        self._multiplier = CONF.resex.weight_multiplier

    def weight_multiplier(self, host_state):
        if not host_state.aggregates:
            return self._multiplier
        return scheduler_utils.get_weight_multiplier(
            host_state, conf_mod.AGGREGATE_KEYS["weight_multiplier"], self._multiplier)

    def _weigh_object(self, host_state, weight_properties):
        request = rules.classify(weight_properties)
        if request.kind is None:
            return 0.0
        return self._weights(request, [host_state])[0]

    def weigh_objects(self, weighed_obj_list, weight_properties):
        self._multiplier = CONF.resex.weight_multiplier
        request = rules.classify(weight_properties)
        if request.kind is None:
            return [0.0] * len(weighed_obj_list)
        return self._weights(request, [obj.obj for obj in weighed_obj_list])

    def _weights(self, request, host_states):
        opts = CONF.resex
        judge = rules.Judge(request, CONF, time.time())
        floor = opts.weight_noise_floor
        verdicts, entries, limits = judge.scan(host_states)
        good, bad = rules.GOOD, rules.BAD
        if request.kind == rules.SENSITIVE and floor > 0.0:
            span = 1.0 - GOOD_MIN
            out = [(max(GOOD_MIN, 1.0 - span * (round(e.latched / floor) * floor) / limit)
                    if limit > 0.0 else 1.0) if v is good
                   else raw_weight(request, v, e, limit, floor) if v is bad else None
                   for v, e, limit in zip(verdicts, entries, limits)]
        else:
            out = [raw_weight(request, v, e, limit, floor) if v is not rules.UNKNOWN else None
                   for v, e, limit in zip(verdicts, entries, limits)]
        if request.group_hosts and opts.topology_file:
            _toward_group(request, judge, host_states, verdicts, limits, out, floor)
        if request.kind == rules.BULK and opts.topology_file:
            _bulk_behind_links(request, judge, host_states, verdicts, entries, out, floor)
        unknown = [i for i, w in enumerate(out) if w is None] if rules.UNKNOWN in verdicts else ()
        if unknown:
            policy = opts.unknown_host_policy
            if LOG.isEnabledFor(logging.DEBUG):
                for i in unknown:
                    LOG.debug("ResEx: no fresh report for host %s; unknown_host_policy=%s",
                              host_states[i].host, policy)
            if policy == "pass":
                known = [w for w in out if w is not None]
                value = (sum(known) / len(known)) if known else UNKNOWN
            else:
                value = UNKNOWN if policy == "last" else 0.0
            for i in unknown:
                out[i] = value
        return out


def _bulk_behind_links(request, judge, host_states, verdicts, entries, out, floor):
    """A bulk request's known hosts weighed again with their most loaded shared link's load."""
    topo = rules.topology(CONF.resex.topology_file)
    loads = rules.LINKS.loads(topo, judge.reader, judge.now)
    if not loads:
        return
    for i, (verdict, state, entry) in enumerate(zip(verdicts, host_states, entries)):
        behind = topo.links_of(state.host)
        if verdict is rules.UNKNOWN or not behind:
            continue
        u = max(loads[k.name].utilisation for k in behind)
        out[i] = raw_weight(request, verdict, entry, 0.0, floor, u)


def _toward_group(request, judge, host_states, verdicts, limits, out, floor):
    """Lower each known-good host's weight ``out`` to what its path to the group allows."""
    topo = rules.topology(CONF.resex.topology_file)
    loads = rules.LINKS.loads(topo, judge.reader, judge.now)
    if not loads:
        return
    toward = links_mod.toward(topo, loads, request.group_hosts)
    span = 1.0 - GOOD_MIN
    for i, (verdict, state, limit) in enumerate(zip(verdicts, host_states, limits)):
        if verdict is not rules.GOOD or limit <= 0.0:
            continue
        load = toward(state.host)
        if load is not None:
            q = _rounded(load.congestion_pct, floor)
            out[i] = min(out[i], max(GOOD_MIN, 1.0 - span * q / limit))
