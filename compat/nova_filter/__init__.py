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

"""The scheduler plugin's old name, kept for one release: use :mod:`resex_nova`.

nova.conf files written for an earlier release name the filter and the
weigher as ``nova_filter.filter.ResExCongestionFilter`` and
``nova_filter.weigher.ResExCongestionWeigher``, and operators' scripts run
``python -m nova_filter.check``. Those paths keep loading the very same
classes from :mod:`resex_nova` (the package was renamed so that it no
longer installs a generic top-level name), and importing this package logs
one deprecation warning, so the scheduler's log says what to change before
the shim is dropped.
"""

import logging

LOG = logging.getLogger(__name__)

LOG.warning("the module path nova_filter is deprecated and will be removed in the next "
            "release: name resex_nova.filter.ResExCongestionFilter and "
            "resex_nova.weigher.ResExCongestionWeigher in nova.conf, and run "
            "python -m resex_nova.check")
