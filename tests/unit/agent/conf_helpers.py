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

"""A real agent ConfigOpts, loaded from the text of a config file."""

import os
import tempfile

from oslo_config import cfg

from resex_agent import conf as agent_conf


def conf_from_text(text):
    """Every agent option registered; ``text`` is read as a config file.

    The host is the simulated one and the board is off unless ``text`` sets
    ``[agent] host_driver`` or ``[board] url`` (the product's defaults are
    libvirt and a SQLite board).
    """
    conf = cfg.ConfigOpts()
    agent_conf.register_opts(conf)
    fd, path = tempfile.mkstemp(suffix=".conf")
    with os.fdopen(fd, "w") as f:
        f.write("[agent]\nhost_driver = simulated\n[board]\nurl =\n" + text)
    try:
        conf(["--config-file", path], project="resex")
    finally:
        os.unlink(path)
    return conf
