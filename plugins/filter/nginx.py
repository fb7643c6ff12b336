# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for the nginx front door of the engines."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.homelab.llm_server.plugins.module_utils import _front_door


def nginx_errors(settings):
    """What is wrong with one host's nginx settings; [] when nothing is."""
    if not isinstance(settings, dict):
        raise AnsibleFilterError('nginx_errors: expects a dict of nginx settings')
    return _front_door.nginx_errors(settings)


class FilterModule(object):
    """nginx filters."""

    def filters(self):
        return {
            'nginx_errors': nginx_errors,
        }
