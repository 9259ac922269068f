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

"""The fleet study: many simulated hosts placed by Nova's own scheduler code.

``resex-sim cluster SCENARIO`` (:mod:`~resex_research.cluster.cluster_command`) runs a
day of a cloud (:mod:`~resex_research.cluster.demand`: flavors, arrivals,
heavy-tailed lifetimes, a daily swing, a host failure) under several
scheduler and host configurations (:mod:`~resex_research.cluster.spec`),
each placed by nova's ``HostManager`` filters and weighers
(:mod:`~resex_research.cluster.scheduler`), each host's latency and
throughput taken from a surrogate calibrated by running the host simulator
(:mod:`~resex_research.cluster.surrogate`), and each host publishing its
report to a real price board (:mod:`~resex_research.cluster.fleet`).
A scenario with racks (:mod:`~resex_research.cluster.leaf_spine`) is the
study across hosts: links shared between hosts
(:mod:`~resex_research.cluster.fabric_links`) and host-only against
fabric-wide ResEx (:mod:`~resex_research.cluster.spine_fleet`).
The design is in ``doc/source/fleet.rst``.
"""
