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

"""Deprecated path of :mod:`resex_nova.weigher`: the same module under its old name.

The module object itself is aliased (not a copy of its names), so a class
loaded by its old path is the class nova compares, and patching either name
patches both.
"""

import sys

import resex_nova.weigher

sys.modules[__name__] = resex_nova.weigher
