"""The Reso market (paper Sections V-C and VI): pure, no I/O, no clock.

``Market`` owns the ledger and a policy; the agent loop and the simulator
feed it one interval at a time and apply what it decides.
"""

from resex_libvirt.market import market as _market
from resex_libvirt.market import records as _records

EpochSummary = _market.EpochSummary
Market = _market.Market
MarketParams = _market.MarketParams
Decision = _records.Decision
LatencyWindow = _records.LatencyWindow
Sample = _records.Sample
VMSpec = _records.VMSpec
