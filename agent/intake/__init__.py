"""The latency intake: tenants' and probes' latency reports in, bounded per-VM windows out.

``LatencyIntake`` (:mod:`agent.intake.service`) is what the agent loop uses;
the wire format is :mod:`benchex.wire` (``doc/source/latency.rst``).
"""

from agent.intake.params import IntakeParams  # noqa: F401
from agent.intake.service import LatencyIntake  # noqa: F401
