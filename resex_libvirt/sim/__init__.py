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

"""The simulated ResEx host (paper Section VII), runnable anywhere.

The paper's testbed is two Xen hosts with Mellanox HCAs on a 1 GiB/s
InfiniBand link, one VM per pCPU, each running a BenchEx server (Section IV).
This package models one such host closely enough for the agent to drive it
(``resex-agent`` with ``[sim] scenario``, as nova's fake driver stands in
for a hypervisor) and for the market to run against it:

* :mod:`~resex_libvirt.sim.model` -- the model's calibrated, frozen parameters;
* :mod:`~resex_libvirt.sim.link` -- the shared link, processor sharing among
  the transfers in flight (the HCA's arbitration among queue pairs);
* :mod:`~resex_libvirt.sim.credit_scheduler` -- a Xen credit-scheduler-like CPU cap;
* :mod:`~resex_libvirt.sim.workload` -- a BenchEx-like server per VM;
* :mod:`~resex_libvirt.sim.testbed` -- the discrete-event engine tying them;
* :mod:`~resex_libvirt.sim.scenario` -- scenarios as TOML data;
* :mod:`~resex_libvirt.sim.host` -- the adapter the agent drives
  (``Hypervisor`` + ``FabricMonitor`` + latency source + clock);
* :mod:`~resex_libvirt.sim.runner` -- the fast runner (market, no agent);
* :mod:`~resex_libvirt.sim.demo` -- the demo's comparison table.

The research built on it (the paper's reproduction, the peers, the fleet
study, ``resex-sim``) is the ``resex_research`` package, a distribution of
its own that no compute node installs.
"""
