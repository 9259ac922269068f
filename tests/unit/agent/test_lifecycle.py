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

"""The agent owns its lifecycle: built with its parts, each started once and closed once.

The parts below are real objects of their own (no mocks): they count the
calls the agent makes to them, next to the simulated host.
"""

import faulthandler
import os
import tempfile
import threading
import unittest
from unittest import mock

from oslo_config import cfg

from resex_agent import builder
from resex_agent import conf as agent_conf
from resex_agent import journal as journal_mod
from resex_agent import loop
from resex_agent import resex_agent
from resex_agent import watchdog
from resex_libvirt import exceptions
from tests.unit.agent import test_loop


class Counted:
    """A part that counts its starts and closes, and may fail to start."""

    def __init__(self, log, name, fail_start=None):
        self.log = log
        self.name = name
        self.fail_start = fail_start
        self.starts = self.closes = 0

    def start(self):
        self.log.append("start " + self.name)
        self.starts += 1
        if self.fail_start is not None:
            raise self.fail_start

    def close(self):
        self.log.append("close " + self.name)
        self.closes += 1


class CountedSource(Counted):
    """A latency source with nothing to report (the intake's part)."""

    def windows(self):
        return {}

    def sync(self, vms):
        pass

    def stats(self):
        return {}


class CountedSink(Counted):
    """A metrics sink that counts what it observes."""

    def __init__(self, log, name="metrics", fail_start=None):
        super().__init__(log, name, fail_start)
        self.epochs = 0

    def observe_interval(self, record):
        pass

    def observe_epoch(self, record):
        self.epochs += 1


class ClosingHost(test_loop.CountingHost):
    """The simulated host (hypervisor, fabric monitor, latency source), counting closes."""

    closes = 0

    def close(self):
        self.closes += 1
        super().close()


class MemoryBoard:
    """A board that keeps what it is sent and on which thread."""

    def __init__(self):
        self.reports = []
        self.threads = set()
        self.closes = 0

    def publish(self, report):
        self.reports.append(report)
        self.threads.add(threading.current_thread().name)

    def count(self):
        return 1

    def close(self):
        self.closes += 1


def make_parts(log, source_fails=None, duration=2.0, board=None, background=False):
    scenario = test_loop.scenario_mod.load("paper_64k_vs_2m").with_duration(duration)
    parts = builder.Parts()
    sim = ClosingHost(scenario)
    parts.hypervisor = parts.fabric = sim
    parts.intake = CountedSource(log, "intake", source_fails)
    parts.latency_sources = [sim, parts.intake]
    parts.clock = sim.clock()
    parts.interval_s, parts.epoch_s = scenario.interval_s, scenario.epoch_s
    parts.board = board
    parts.background_publish = background
    return parts


def build(log, metrics_fails=None, parts=None, **kwargs):
    parts = parts or make_parts(log, **kwargs)
    metrics = CountedSink(log, fail_start=metrics_fails)
    agent = builder.build_agent(test_loop.make_conf(), parts, metrics=metrics)
    return agent, parts.hypervisor, parts.latency_sources[1], metrics


class LifecycleTest(unittest.TestCase):

    def test_each_part_starts_once_and_closes_once(self):
        log = []
        agent, sim, source, metrics = build(log)
        agent.start()
        agent.start()
        agent.run()         # already started: starts nothing again
        agent.shutdown()
        agent.shutdown()    # already shut down: closes nothing again
        self.assertEqual((1, 1), (source.starts, source.closes))
        self.assertEqual((1, 1), (metrics.starts, metrics.closes))
        self.assertGreater(metrics.epochs, 0)
        # One object playing three parts is closed once.
        self.assertEqual(1, sim.closes)
        # Closed in the reverse order of their building: the endpoint was built last.
        self.assertEqual(["start metrics", "start intake", "close metrics", "close intake"], log)

    def test_serve_starts_runs_and_shuts_down_once(self):
        log = []
        agent, sim, source, metrics = build(log)
        resex_agent.serve(agent)
        self.assertEqual(["start metrics", "start intake", "close metrics", "close intake"], log)
        self.assertEqual(1, sim.closes)
        self.assertGreater(agent.epochs, 0)

    def test_sigusr1_writes_every_threads_stack_while_the_agent_serves(self):
        agent, _sim, _source, _metrics = build([])
        run = agent.run

        def run_after_a_dump():
            os.kill(os.getpid(), resex_agent.DUMP_SIGNAL)
            run()

        agent.run = run_after_a_dump
        with tempfile.TemporaryFile("w+") as dump:
            resex_agent.serve(agent, dump_file=dump)
            dump.seek(0)
            text = dump.read()
        self.assertIn("run_after_a_dump", text)
        self.assertIn("(most recent call first)", text)
        # Served and gone: the signal is no longer the agent's.
        self.assertFalse(faulthandler.unregister(resex_agent.DUMP_SIGNAL))

    def test_a_part_that_cannot_start_shuts_the_agent_down(self):
        log = []
        agent, sim, source, metrics = build(log, source_fails=OSError("socket in use"))
        with self.assertRaises(loop.StartFailed) as ctx:
            agent.start()
        self.assertEqual("starting the latency intake", ctx.exception.step)
        self.assertIsInstance(ctx.exception.cause, OSError)
        self.assertEqual(["start metrics", "start intake", "close metrics", "close intake"], log)
        self.assertEqual(1, sim.closes)
        agent.shutdown()
        self.assertEqual(4, len(log))
        with self.assertRaises(loop.StartFailed):
            agent.run()     # a shut down agent does not start again
        self.assertEqual(0, agent.ticks)

    def test_the_daemon_says_which_part_could_not_start(self):
        log = []
        agent, _sim, _source, _metrics = build(log, metrics_fails=RuntimeError("boom"))
        with self.assertRaises(resex_agent._StartFailed) as ctx:
            resex_agent.serve(agent)
        self.assertEqual("starting the metrics endpoint: unexpected RuntimeError: boom",
                         ctx.exception.message)
        self.assertEqual(["start metrics", "close metrics", "close intake"], log)

    def test_the_start_restores_what_the_journal_holds_before_controlling(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "journal.json")
            parts = make_parts([])
            sim = parts.hypervisor
            uuid = next(iter(sim.vms()))
            original = sim.get_knobs(uuid)
            journal_mod.Journal(path).remember(uuid, original)
            sim.set_knobs(uuid, 10.0, 256)      # the unclean stop left it capped
            parts.journal = journal_mod.Journal(path)
            agent, _sim, _source, _metrics = build([], parts=parts)
            self.addCleanup(agent.shutdown)
            self.assertNotEqual(original, sim.get_knobs(uuid))
            agent.start()
            self.assertEqual(original, sim.get_knobs(uuid))
            self.assertEqual({}, journal_mod.Journal(path).originals())


class ClosedOnceTest(unittest.TestCase):
    """The parts are closed once, by the exit stack they were built with, whatever happens."""

    def test_a_build_that_fails_halfway_closes_what_it_opened_once(self):
        opened = []

        def simulated(conf, parts):
            real_simulated(conf, parts)
            opened.append(parts.hypervisor)
            raise exceptions.ConfigError("the next part cannot be built")

        real_simulated = builder._simulated
        conf = test_loop.make_conf(agent={"host_driver": "simulated"}, board={"url": ""})
        with mock.patch.object(builder, "_simulated", simulated), \
                mock.patch("resex_libvirt.sim.host.SimHost", ClosingHost):
            with self.assertRaises(exceptions.ConfigError):
                builder.build_parts(conf)
        sim, = opened
        self.assertEqual(1, sim.closes)     # hypervisor, fabric and latency source: once

    def test_an_agent_that_cannot_be_built_closes_its_parts_once(self):
        log = []
        parts = make_parts(log)
        conf = test_loop.make_conf(market={"policy": "no-such-policy"})
        with self.assertRaises(exceptions.ConfigError):
            builder.build_agent(conf, parts, metrics=CountedSink(log))
        self.assertEqual(1, parts.hypervisor.closes)
        self.assertEqual(["close metrics", "close intake"], log)
        parts.close()       # nothing is closed twice
        self.assertEqual(1, parts.hypervisor.closes)
        self.assertEqual(2, len(log))

    def test_the_daemons_failed_build_closes_the_parts_once(self):
        log = []
        parts = make_parts(log)
        conf = test_loop.make_conf(market={"policy": "no-such-policy"})
        with mock.patch.object(builder, "build_parts", lambda conf: parts):
            with self.assertRaises(resex_agent._StartFailed):
                resex_agent._build(conf)
        self.assertEqual(["close intake"], log)
        self.assertEqual(1, parts.hypervisor.closes)

    def test_a_part_handed_twice_is_owned_once(self):
        parts = builder.Parts()
        source = CountedSource([], "intake")
        parts.intake = source
        parts.latency_sources = [source, source]
        parts.close()
        parts.close()
        self.assertEqual(1, source.closes)


class SlowHost(ClosingHost):
    """The simulated host whose next knob write blocks until ``release`` is set."""

    def __init__(self, scenario):
        super().__init__(scenario)
        self.block = threading.Event()
        self.release = threading.Event()

    def set_knobs(self, uuid, cap_pct, weight):
        if self.block.is_set():
            self.release.wait(10.0)
        return super().set_knobs(uuid, cap_pct, weight)


class RestoreAfterAStuckCallTest(unittest.TestCase):
    """SIGTERM while a knob write overran the watchdog's bound (libvirtd busy)."""

    @staticmethod
    def _agent(tmp):
        """An agent on a slow simulated host behind a 50 ms watchdog, with a journal."""
        parts = make_parts([])
        sim = SlowHost(parts.hypervisor.scenario)
        dog = watchdog.Watchdog(0.05, name="libvirt")
        parts.hypervisor = watchdog.Guarded(sim, dog)
        parts.fabric = sim
        parts.intake = CountedSource([], "intake")
        parts.latency_sources = [sim, parts.intake]
        parts.clock = sim.clock()
        parts.journal = journal_mod.Journal(os.path.join(tmp, "journal.json"))
        agent, _sim, _source, _metrics = build([], parts=parts)
        return agent, parts, sim, dog

    def test_the_restore_waits_for_the_stuck_call_and_then_restores_every_vm(self):
        with tempfile.TemporaryDirectory() as tmp:
            agent, parts, sim, dog = self._agent(tmp)
            originals = {uuid: sim.get_knobs(uuid) for uuid in sim.vms()}
            for uuid in originals:
                parts.journal.remember(uuid, originals[uuid])
                sim.set_knobs(uuid, 10.0, 512)
            sim.block.set()
            uuid = next(iter(originals))
            with self.assertRaises(exceptions.HypervisorUnavailable):
                parts.hypervisor.set_knobs(uuid, 20.0, 700)
            self.assertFalse(dog.available)
            threading.Timer(0.4, sim.release.set).start()
            agent.shutdown()
            # The stuck write landed first, then the restore wrote every original.
            self.assertIn((sim.name_of(uuid), 20.0, 700), sim.writes)
            self.assertEqual(originals, {u: sim.get_knobs(u) for u in originals})
            self.assertEqual({}, journal_mod.Journal(parts.journal.path).originals())

    def test_what_the_deadline_leaves_stays_in_the_journal(self):
        with tempfile.TemporaryDirectory() as tmp:
            agent, parts, sim, _dog = self._agent(tmp)
            agent.shutdown_timeout_s = 0.5
            uuid = next(iter(sim.vms()))
            parts.journal.remember(uuid, sim.get_knobs(uuid))
            sim.block.set()
            with self.assertRaises(exceptions.HypervisorUnavailable):
                parts.hypervisor.set_knobs(uuid, 20.0, 700)
            with self.assertLogs("resex_agent.loop", "ERROR") as logs:
                agent.shutdown()
            sim.release.set()
            self.assertIn(uuid, journal_mod.Journal(parts.journal.path).originals())
            self.assertIn("1 left in the journal", "\n".join(logs.output))


class BackgroundPublishTest(unittest.TestCase):
    """Publishing off the loop is a setting of the build, not a test of the clock's type."""

    def published_on(self, background):
        board = MemoryBoard()
        agent, _sim, _source, _metrics = build([], board=board, background=background)
        self.assertIs(background, agent.settings.background_publish)
        agent.run()
        agent.shutdown()
        self.assertEqual(agent.epochs, len(board.reports))
        self.assertEqual(1, board.closes)
        return board.threads

    def test_a_simulated_clock_publishes_in_the_background_when_set(self):
        self.assertEqual({"board-publisher"}, self.published_on(True))

    def test_and_inline_when_not(self):
        self.assertEqual({threading.current_thread().name}, self.published_on(False))

    def test_the_drivers_choose_it(self):
        conf = test_loop.make_conf(agent={"host_driver": "simulated"}, board={"url": ""})
        parts = builder.build_parts(conf)
        self.addCleanup(parts.close)
        self.assertFalse(parts.background_publish)


class ReloadTest(unittest.TestCase):

    def test_a_requested_reload_rereads_the_configuration_before_the_next_interval(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "resex.conf")
            text = ("[agent]\nhost_driver = simulated\nmax_epochs = 1\ndeadband_pct = %g\n"
                    "[board]\nurl =\n[sim]\nrealtime = 0\n")
            with open(path, "w") as f:
                f.write(text % 1.0)
            conf = cfg.ConfigOpts()
            agent_conf.register_opts(conf)
            conf(["--config-file", path], project="resex")
            agent = builder.build_agent(conf)
            self.addCleanup(agent.shutdown)
            with open(path, "w") as f:
                f.write(text % 3.0)
            agent.request_reload()
            agent.run()
            self.assertEqual(3.0, agent.controller.deadband_pct)
