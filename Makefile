# The README's two commands are `make demo` and `make test`. Both bootstrap
# .venv first (idempotent: Debian packages from bindep.txt, then pip).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.bootstrapped

.PHONY: bootstrap demo test lab lab-judge lab-verbs-smoke bench faults soak pep8 genconfig docs \
	benchex-static clean cloud cloud-down cloud-status cloud-test dist

# nova-scheduler runs native threads; the in-process nova of the tests too.
export OS_NOVA_DISABLE_EVENTLET_PATCHING := 1

bootstrap: $(STAMP)

# BenchEx (./benchex, its own distribution) is installed with the
# requirements: resex-libvirt's intake imports its wire format. The research
# (./resex_research, its own distribution: resex-sim) after the project, whose
# requirements it shares (nova, for the fleet study, is a test requirement).
# Every version pinned by upper-constraints.txt (a reproducible install).
$(STAMP): requirements.txt test-requirements.txt upper-constraints.txt setup.cfg bindep.txt \
		benchex/pyproject.toml resex_research/pyproject.toml
	tools/install-deb.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -c upper-constraints.txt -e ./benchex -r requirements.txt \
		-r test-requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	$(BIN)/pip install -q --no-deps -e ./resex_research
	touch $@

demo: bootstrap
	$(BIN)/resex-agent --config-file etc/resex/resex-agent-demo.conf

# Unit, functional and the lab smoke tests (real libvirtd + QEMU guests), and
# the cloud smoke (a real OpenStack on this machine, doc/source/cloud.rst: about
# 5 minutes); the lab and the cloud set themselves up as root and skip, saying
# why, without root.
test: bootstrap
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit tests/functional tests/lab \
		tests/cloud

# The full lab: cap accuracy and the ResEx experiment on real guests, over TCP
# and over RDMA verbs (Soft-RoCE guests).
lab: bootstrap
	$(BIN)/python -m tests.lab.run
	$(BIN)/python -m tests.lab.experiment --out lab-results
	$(BIN)/python -m tests.lab.experiment --transport rdma --out lab-results/verbs

# The judging protocol (doc/source/lab.rst, "The judging protocol"): on a quiet
# host, 3 interleaved rounds of 120 s runs per transport; ARGS for its options.
lab-judge: bootstrap
	$(BIN)/python -m tests.lab.protocol --transport tcp --out lab-results/judge-tcp $(ARGS)
	$(BIN)/python -m tests.lab.protocol --transport rdma --out lab-results/judge-verbs $(ARGS)

# A real OpenStack on this machine with the plugin in it (doc/source/cloud.rst):
# keystone, glance, placement, nova, two compute nodes with their libvirtd and
# resex-agent, etcd as the board; state and logs under $(RESEX_CLOUD_DIR).
# As root; it holds /tmp/resex-lab.lock until cloud-down.
RESEX_CLOUD_DIR ?= /var/tmp/resex-cloud
export RESEX_CLOUD_DIR

cloud: bootstrap
	$(BIN)/python -m tests.cloud up

cloud-down: bootstrap
	$(BIN)/python -m tests.cloud down

cloud-status: bootstrap
	$(BIN)/python -m tests.cloud status

# Bring-up, every end-to-end scenario, teardown: scenario | result | time.
cloud-test: bootstrap
	$(BIN)/python -m tests.cloud test

# The smoke test of ResEx on RDMA verbs alone (Soft-RoCE guests, the real agent;
# also part of make test).
lab-verbs-smoke: bootstrap
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/lab/test_verbs_smoke.py

bench: bootstrap
	$(BIN)/python -m bench

# The agent under faults at full length (board locked or stopped, libvirtd
# hung, SIGTERM while hung, full state directory, a second agent, slow-loris):
# prints fault | control intervals lost | caps wrong after | recovery time.
# The same faults, shorter, are tests/functional/faults (in make test).
faults: bootstrap
	$(BIN)/python -m tests.faults

# "A day in an hour" (doc/source/operations.rst, "Soak"): the real agent on the
# real libvirtd publishing to a 3-member etcd, under guest churn, SIGHUPs and
# restarts of libvirtd and of etcd members; prints the slopes of its RSS, open
# files, threads, journal and board. As root, holding the lab lock. ARGS: the
# seconds (default 3600), e.g. make soak ARGS=600.
soak: bootstrap
	$(BIN)/python -m tests.faults --soak $(or $(ARGS),3600)

pep8: bootstrap
	$(BIN)/flake8 resex_libvirt resex_research agent nova_filter compat benchex tests bench tools
	$(BIN)/bashate -v devstack/plugin.sh devstack/settings tests/unit/devstack/devstack_shim.sh \
		tools/devstack-functions.sh

docs: bootstrap
	$(BIN)/pip install -q -c upper-constraints.txt -r doc/requirements.txt
	$(BIN)/sphinx-build -W -b html doc/source doc/build/html

# What an operator installs (doc/source/install.rst, "From the built
# wheels"): the sdist and the wheel of each distribution of this repository,
# resex-libvirt (its version from git through pbr), resex-benchex and
# resex-research, in dist/. Each wheel is built from its sdist, so an sdist
# that misses a file fails here. No isolation: the build backends are the
# pinned ones of the venv (pbr, setuptools), no index is asked.
DISTRIBUTIONS := . benchex resex_research

dist: bootstrap
	rm -rf dist
	for d in $(DISTRIBUTIONS); do \
		$(BIN)/python -m build --no-isolation --outdir dist $$d || exit 1; \
	done

benchex-static: build/benchex/benchex

build/benchex/benchex: benchex/benchex.c benchex/build.sh
	sh benchex/build.sh build/benchex

genconfig: bootstrap
	$(BIN)/oslo-config-generator --config-file etc/resex/resex-agent-config-generator.conf
	$(BIN)/oslo-config-generator --config-file etc/resex/resex-nova-config-generator.conf
	$(BIN)/oslo-config-generator --config-file \
		etc/resex/resex-placement-sync-config-generator.conf

clean:
	rm -rf $(VENV) .tox build dist *.egg-info
