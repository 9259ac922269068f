"""BenchEx: the trading-exchange latency benchmark of the ResEx paper (Section IV).

A TCP server that queues requests first-come-first-served and prices
options for each (:mod:`benchex.server`), a client that timestamps
requests in closed or open loop (:mod:`benchex.client`), a reporter
that feeds the agent's latency intake (:mod:`benchex.reporter`), and
a static C program with the same protocol for guests without Python
(``benchex.c``, built by ``build.sh``).
"""
