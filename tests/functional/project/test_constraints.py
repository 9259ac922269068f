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

"""upper-constraints.txt pins every requirement at a version the requirement allows."""

import os
import re
import unittest

from packaging import requirements
from packaging import utils

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
REQUIREMENT_FILES = ("requirements.txt", "test-requirements.txt",
                     os.path.join("doc", "requirements.txt"))
#: Distributions of this repository: installed from their directories.
LOCAL = {"resex-benchex", "resex-libvirt"}


def _lines(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("-"):
                yield line


def constraints():
    pins = {}
    for line in _lines("upper-constraints.txt"):
        name, version = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line).groups()
        pins[utils.canonicalize_name(name)] = version
    return pins


class UpperConstraintsTest(unittest.TestCase):

    def test_every_requirement_is_pinned_and_its_pin_satisfies_it(self):
        pins = constraints()
        problems = []
        for path in REQUIREMENT_FILES:
            for line in _lines(path):
                req = requirements.Requirement(line)
                name = utils.canonicalize_name(req.name)
                if name in LOCAL:
                    continue
                if name not in pins:
                    problems.append("%s: %s is not in upper-constraints.txt" % (path, req.name))
                elif not req.specifier.contains(pins[name], prereleases=True):
                    problems.append("%s: %s, pinned at %s" % (path, req, pins[name]))
        self.assertEqual([], problems)
