# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's module_utils that the programs share with its modules and filters.

Their one home is the collection's plugins/module_utils (an Ansible module
can import nothing else). The wheel carries them here, as the host_wheel
action builds it (host/pyproject.toml names them); in a checkout of the
collection this package reads them from plugins/module_utils itself.
"""

import os

_CHECKOUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', 'plugins', 'module_utils')
if os.path.isfile(os.path.join(_CHECKOUT, '_nvml.py')):
    __path__.append(os.path.normpath(_CHECKOUT))  # noqa: F821 (a package's own __path__)
