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


"""install.rst's ini snippets, as the cloud smoke reads them (no root, no services)."""

import unittest

from tests.cloud import scenarios


class InstallSnippetsTest(unittest.TestCase):

    def test_the_agent_and_scheduler_snippets_are_found_with_their_options(self):
        snippets = scenarios.install_snippets()
        agent = next(s for s in snippets if "agent" in s)
        scheduler = next(s for s in snippets if "filter_scheduler" in s)
        self.assertEqual(["libvirt"], agent["agent"]["host_driver"])
        self.assertIn("url", agent["board"])
        # available_filters is multi-valued: both lines are kept.
        self.assertEqual(2, len(scheduler["filter_scheduler"]["available_filters"]))
        self.assertIn("board_url", scheduler["resex"])

    def test_every_site_value_names_a_snippet_option(self):
        options = {(section, option) for s in scenarios.install_snippets()
                   for section, opts in s.items() for option in opts}
        self.assertLessEqual(set(scenarios.SITE_VALUES), options)

    def test_multi_valued_options_keep_every_line_and_comments_are_skipped(self):
        self.assertEqual({"a": {"x": ["1", "2"], "y": ["z = w"]}},
                         scenarios.parse_ini("[a]\n# c\nx = 1\nx = 2\ny = z = w\n"))
