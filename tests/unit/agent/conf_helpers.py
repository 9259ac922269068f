"""A real agent ConfigOpts, loaded from the text of a config file."""

import os
import tempfile

from oslo_config import cfg

from agent import conf as agent_conf


def conf_from_text(text):
    """Every agent option registered; ``text`` is read as a config file.

    The board is off unless ``text`` sets ``[board] url``.
    """
    conf = cfg.ConfigOpts()
    agent_conf.register_opts(conf)
    fd, path = tempfile.mkstemp(suffix=".conf")
    with os.fdopen(fd, "w") as f:
        f.write("[board]\nurl =\n" + text)
    try:
        conf(["--config-file", path], project="resex")
    finally:
        os.unlink(path)
    return conf
