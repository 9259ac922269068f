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

"""A cortex-like weigher for the fleet study: CPU usage, contention, noisy projects.

SAP's cortex (``cobaltcore-dev/cortex``, an external scheduler Nova
delegates its weighing to; its scheduler steps read on the main branch in
2026) ranks hosts by features it syncs from Prometheus and vROps, never by
fabric traffic:

* ``kvm_avoid_overloaded_hosts_cpu``: a host's average CPU usage, min-max
  scaled into a negative activation (the busier, the lower);
* ``vmware_avoid_contended_hosts``: a host's CPU contention (the time vCPUs
  wait for a pCPU, steal as the guests see it), scaled the same way;
* ``vmware_anti_affinity_noisy_projects``: a host where the request's own
  project already runs VMs averaging more than ``avgCPUThreshold`` (20% in
  its example configuration) of CPU is pushed down.

:class:`CortexLikeWeigher` is those three as one nova weigher, reading a
:class:`FeatureStore` the fleet study keeps up to date from each host's mix,
as cortex reads its feature database.

Simplifications, stated:

* **CPU per VM** is what the host simulator measures for the fleet's
  workloads (:func:`kind_cpu`: a sensitive tenant's and a bulk tenant's CPU
  percent, run alone with the other; an RDMA server busy-polls while its
  transfer is in flight, so a bulk tenant shows nearly all its vCPU), times
  the flavor's vCPUs; the neutral tenants are idle (the fleet models neither
  their CPU nor their I/O).
* **Contention** is the demand over the host's pCPUs; the fleet places
  vCPUs with an allocation ratio of 1, so it is always 0 here: measured, and
  shown, not assumed.
* **Fresh features**: the store changes with the mix, where cortex's
  features lag by its sync interval and lookback window.
* **Activations** are each step's ``MinMaxScale`` into [-1, 0] (usage and
  contention 0..100%) and -1 for a noisy project, summed; nova's weight
  handler then normalises them across the hosts like any weigher's, with a
  multiplier of 1.

A peer for comparison, with the simulator: not a weigher of resex_nova.
"""

from nova.scheduler import weights

#: ``vmware_anti_affinity_noisy_projects``'s ``avgCPUThreshold`` in cortex's example config.
NOISY_CPU_PCT = 20.0


def min_max_scale(value, lo, hi, act_lo, act_hi):
    """cortex's ``MinMaxScale``: ``value`` from [lo, hi] onto [act_lo, act_hi], clamped."""
    frac = min(1.0, max(0.0, (value - lo) / (hi - lo)))
    return act_lo + frac * (act_hi - act_lo)


def kind_cpu(model):
    """``{kind: CPU fraction of one vCPU}`` of the fleet's tenants, measured on the host sim."""
    from resex_libvirt.sim import runner
    from resex_research.cluster import spec as spec_mod
    from resex_research.cluster import surrogate
    res = runner.run_static(surrogate.mix_scenario(model, 1, 1))
    return {spec_mod.SENSITIVE: res.vm("sensitive0").cpu_pct / 100.0,
            spec_mod.BULK: res.vm("bulk0").cpu_pct / 100.0, spec_mod.NEUTRAL: 0.0}


class FeatureStore:
    """Each host's features: CPU usage and contention (%), and its noisy projects."""

    def __init__(self, cpu_by_kind, host_vcpus):
        self.cpu_by_kind = dict(cpu_by_kind)
        self.host_vcpus = float(host_vcpus)
        self.hosts = {}

    def update(self, name, vms):
        """Recompute ``name``'s features from its VMs (``(kind, vcpus, project)`` each)."""
        demand, per_project = 0.0, {}
        for kind, vcpus, project in vms:
            used = self.cpu_by_kind.get(kind, 0.0) * vcpus
            demand += used
            pct = per_project.setdefault(project, [0.0, 0])
            pct[0] += 100.0 * used / max(1, vcpus)
            pct[1] += 1
        self.hosts[name] = {
            "cpu_pct": 100.0 * demand / self.host_vcpus,
            "contention_pct": 100.0 * max(0.0, demand - self.host_vcpus) / self.host_vcpus,
            "noisy": {p for p, (s, n) in per_project.items() if s / n > NOISY_CPU_PCT}}

    def activation(self, name, project):
        f = self.hosts.get(name)
        if f is None:
            return 0.0
        act = min_max_scale(f["cpu_pct"], 0.0, 100.0, 0.0, -1.0)
        act += min_max_scale(f["contention_pct"], 0.0, 100.0, 0.0, -1.0)
        if project in f["noisy"]:
            act -= 1.0
        return act


#: The store the weigher reads: set by the fleet run that enables the weigher.
STORE = None


class CortexLikeWeigher(weights.BaseHostWeigher):
    """cortex's CPU usage, contention and noisy-project steps as one nova weigher."""

    def weight_multiplier(self, host_state):
        return 1.0

    def _weigh_object(self, host_state, weight_properties):
        if STORE is None:
            return 0.0
        return STORE.activation(host_state.host, weight_properties.project_id)


def enabled(sched):
    """True when ``sched`` (the fleet's scheduler) runs the cortex-like weigher."""
    return any(isinstance(w, CortexLikeWeigher) for w in sched.manager.weighers)
