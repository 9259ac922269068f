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

"""The research around ResEx, apart from the product (the ``resex-research`` distribution).

It runs the product's simulated host and fast runner
(:mod:`resex_libvirt.sim`) and market; the product imports nothing from it,
and no compute node installs it.

* :mod:`~resex_research.paper` -- the paper's evaluation (Figs. 5-9) as a set of runs;
* :mod:`~resex_research.paper_policies` -- the paper's Algorithms 1 and 2 exactly;
* :mod:`~resex_research.peers` -- what operators would run instead (Koordinator,
  Crane, an EWMA step), and ``resex-sim compare --peers``;
* :mod:`~resex_research.cluster` -- the fleet study, placed by nova's own
  scheduler code (the ``fleet`` extra: nova);
* :mod:`~resex_research.frontier` -- the static-cap frontier;
* :mod:`~resex_research.calibration` -- the model's calibration figures;
* :mod:`~resex_research.protect` -- the time to protect and the cap swing;
* :mod:`~resex_research.policy_catalog` -- every policy ``resex-sim`` runs, by name;
* :mod:`~resex_research.resex_sim` -- ``resex-sim``.
"""
