# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment(object):

    # The attributes every module of this collection shares: full check mode
    # support, and Linux hosts. Use it with DIFF or NO_DIFF, which say whether
    # diff mode is supported. A module can still override a value (for
    # example platform.platforms) in its own attributes.
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
  platform:
    description: Target OS/families that can be operated against.
    support: N/A
    platforms: linux
"""

    # Modules that change the host and show the change in diff mode.
    DIFF = r"""
options: {}
attributes:
  diff_mode:
    support: full
"""

    # Modules that show no diff (they only read, or report what they did).
    NO_DIFF = r"""
options: {}
attributes:
  diff_mode:
    support: none
"""

    # Modules that return ansible_facts.
    FACTS = r"""
options: {}
attributes:
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
"""
