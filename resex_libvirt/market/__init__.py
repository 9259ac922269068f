"""The Reso market (paper Sections V-C and VI): pure, no I/O, no clock.

``Market`` owns the ledger and a policy; the agent loop and the simulator
feed it one interval at a time and apply what it decides.
"""

from resex_libvirt.market.market import EpochSummary, Market, MarketParams  # noqa: F401
from resex_libvirt.market.records import Decision, LatencyWindow, Sample, VMSpec  # noqa: F401
