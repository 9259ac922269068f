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

"""BenchEx: the trading-exchange latency benchmark of the ResEx paper (Section IV).

A TCP server that queues requests first-come-first-served and prices
options for each (:mod:`benchex.server`), a client that timestamps
requests in closed or open loop (:mod:`benchex.client`), a reporter
that feeds the agent's latency intake (:mod:`benchex.reporter`), and
a static C program with the same protocol for guests without Python
(``benchex.c``, built by ``build.sh``).
"""
