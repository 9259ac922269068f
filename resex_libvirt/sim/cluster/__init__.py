"""The fleet study: many simulated hosts placed by Nova's own scheduler code.

``resex-sim cluster SCENARIO`` (:mod:`~resex_libvirt.sim.cluster.cli`) runs a
day of a cloud (:mod:`~resex_libvirt.sim.cluster.workload`: flavors, arrivals,
heavy-tailed lifetimes, a daily swing, a host failure) under several
scheduler and host configurations (:mod:`~resex_libvirt.sim.cluster.spec`),
each placed by nova's ``HostManager`` filters and weighers
(:mod:`~resex_libvirt.sim.cluster.scheduler`), each host's latency and
throughput taken from a surrogate calibrated by running the host simulator
(:mod:`~resex_libvirt.sim.cluster.surrogate`), and each host publishing its
report to a real price board (:mod:`~resex_libvirt.sim.cluster.fleet`).
The design is in ``doc/source/fleet.rst``.
"""
