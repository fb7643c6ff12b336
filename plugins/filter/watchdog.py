# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for the gpu_watchdog role: its heat settings checked by the daemon's own code, with the variable named."""

from __future__ import annotations

from ansible_collections.homelab.llm_server.plugins.module_utils import _watchdog

_HINT = ('keys: warn_c, clocks_c, stop_c, hysteresis_c, stop_after_s, cool_for_s, power_fraction, power_limit_w, '
         'clock_fraction, clock_mhz, warn_below_slowdown_c, clocks_below_slowdown_c, stop_below_slowdown_c, '
         'stop_below_shutdown_c')


def _check(settings, name):
    if not isinstance(settings, dict):
        return ['%s must be a dict of heat settings (%s)' % (name, _HINT)]
    # YAML gives 80 as an int and "80" as text; the daemon takes numbers only.
    try:
        _watchdog.HeatConfig.from_dict(settings)
    except (TypeError, ValueError) as err:
        return ['%s: %s (%s)' % (name, err, _HINT)]
    return []


def watchdog_heat_errors(settings, name='gpu_watchdog_heat'):
    """Sentences naming what is wrong with one set of heat settings; [] when the daemon takes it."""
    return _check(settings, name)


def watchdog_heat_per_gpu_errors(per_gpu, heat, name='gpu_watchdog_heat_per_gpu'):
    """The same for each GPU's settings, laid over the common ones as the daemon does."""
    if not isinstance(per_gpu, dict):
        return ['%s must map a GPU (NVML index or UUID) to heat settings' % name]
    errors = []
    for gpu, settings in per_gpu.items():
        label = '%s[%s]' % (name, gpu)
        if not isinstance(settings, dict):
            errors.append('%s must be a dict of heat settings (%s)' % (label, _HINT))
            continue
        merged = dict(heat if isinstance(heat, dict) else {}, **settings)
        errors.extend(_check(merged, label))
    return errors


class FilterModule(object):
    def filters(self):
        return {
            'watchdog_heat_errors': watchdog_heat_errors,
            'watchdog_heat_per_gpu_errors': watchdog_heat_per_gpu_errors,
        }
