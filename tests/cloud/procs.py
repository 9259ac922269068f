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


"""The cloud's processes: each a child started by PID, recorded, stopped by PID.

The table (``run/procs.json`` in the state directory) outlives the command
that started the cloud, so ``make cloud-down`` stops exactly what ``make
cloud`` started: each entry keeps the PID and the process's start time
(``/proc/PID/stat`` field 22), so a PID reused by somebody else is never
signalled.
"""

import json
import os
import subprocess

from tests import machine


class ProcessTable:
    """``run/procs.json``: name -> {pid, started, argv, log}, in start order."""

    def __init__(self, path):
        self.path = path

    def load(self):
        try:
            with open(self.path) as f:
                return json.load(f)
        except FileNotFoundError:
            return []

    def _save(self, entries):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(entries, f, indent=1)
        os.replace(tmp, self.path)

    def add(self, name, pid, argv, log):
        entries = [e for e in self.load() if e["name"] != name]
        entries.append({"name": name, "pid": pid, "started": machine.start_time(pid),
                        "argv": argv, "log": log})
        self._save(entries)

    def remove(self, name):
        self._save([e for e in self.load() if e["name"] != name])

    def get(self, name):
        for entry in self.load():
            if entry["name"] == name:
                return entry
        return None

    def start(self, name, argv, log, env=None, cwd=None):
        """Start ``argv`` in its own session, output appended to ``log``; record it."""
        os.makedirs(os.path.dirname(log), exist_ok=True)
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                    start_new_session=True)
        self.add(name, proc.pid, argv, log)
        return proc

    def stop(self, name, timeout=30.0):
        """SIGTERM, then SIGKILL after ``timeout``; True if it was running."""
        entry = self.get(name)
        if entry is None:
            return False
        was = machine.stop_pid(entry["pid"], entry["started"], timeout)
        self.remove(name)
        return was

    def stop_all(self, timeout_of=lambda name: 30.0):
        """Stop every recorded process, the last started first."""
        for entry in reversed(self.load()):
            self.stop(entry["name"], timeout_of(entry["name"]))
