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

"""The latency intake: tenants' and probes' latency reports in, bounded per-VM windows out.

``LatencyIntake`` (:mod:`resex_agent.intake.server`) is what the agent loop uses;
the wire format is :mod:`benchex.wire` (``doc/source/latency.rst``).
"""

from resex_agent.intake.params import IntakeParams  # noqa: F401
from resex_agent.intake.server import LatencyIntake  # noqa: F401
