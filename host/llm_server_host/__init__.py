# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The programs of homelab.llm_server that run on its hosts.

One module per program, each with a ``main(argv=None)`` that
host/pyproject.toml names as a console script. The host_programs role
installs the wheel the collection builds of this folder into the hosts'
venv; the version is the collection's.
"""
