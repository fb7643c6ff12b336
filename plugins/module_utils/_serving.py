# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Serving layouts: which engine instances a layout means on a host's devices.

Shared by the vllm and llamacpp roles (through the serving_instances filter),
so both engines offer the same three layouts and the proxy sees the same
contract: a name, a port on 127.0.0.1, the served model name and the devices.
"""

import re

LAYOUTS = ('tensor_parallel', 'per_gpu', 'per_gpu_models')


class LayoutError(ValueError):
    """A layout that cannot be laid out; the message names the variable and the fix."""


def slug(text):
    """A unit-name-safe form of a model name: lower case, [a-z0-9-]."""
    cleaned = re.sub(r'[^a-z0-9]+', '-', str(text).lower()).strip('-')
    return cleaned or 'model'


def device_label(device):
    """gpu0 for GPU index 0; a device name (Vulkan0, cpu1) as its slug."""
    if isinstance(device, int):
        return 'gpu%d' % device
    return slug(device)


def _check_model(model, where):
    if not isinstance(model, dict):
        raise LayoutError('%s must be a dict with at least `name` (the served model name), not %r' % (where, model))
    if not model.get('name'):
        raise LayoutError('%s needs `name`: the model name clients ask for (the served model name)' % where)


def serving_instances(layout, devices, model=None, models=None, prefix='llm', port_base=8001, var_prefix='vllm'):
    """The engine instances of one layout.

    devices: the device ids the instances may use, in order (GPU indices for
    vLLM; llama.cpp device names). model: the one model of tensor_parallel and
    per_gpu. models: the per_gpu_models entries, each with `device` (an item
    of devices; vLLM's entries may say `gpu`). Returns a list of dicts: name, index, port, devices, model,
    standby (per_gpu: every instance but the first is a standby).
    """
    if layout not in LAYOUTS:
        raise LayoutError('%s_layout is %r: choose one of %s' % (var_prefix, layout, ', '.join(LAYOUTS)))
    devices = list(devices or [])
    if not devices:
        raise LayoutError('no device to serve on: %s found no GPU and none was given' % var_prefix)
    instances = []
    if layout in ('tensor_parallel', 'per_gpu'):
        _check_model(model, '%s_model' % var_prefix)
        if layout == 'tensor_parallel':
            instances.append({'name': '%s-%s' % (prefix, slug(model['name'])), 'devices': devices,
                              'model': model, 'standby': False})
        else:
            for pos, device in enumerate(devices):
                instances.append({'name': '%s-%s-%s' % (prefix, slug(model['name']), device_label(device)),
                                  'devices': [device], 'model': model, 'standby': pos > 0})
    else:
        if not models:
            raise LayoutError('%s_layout per_gpu_models needs %s_models: a list of models, each with `device`'
                              % (var_prefix, var_prefix))
        used = {}
        names = set()
        for pos, entry in enumerate(models):
            where = '%s_models[%d]' % (var_prefix, pos)
            _check_model(entry, where)
            device = entry.get('device', entry.get('gpu'))
            if device is None or device not in devices:
                raise LayoutError('%s (%s) needs `device` (or `gpu`), one of %s, not %r'
                                  % (where, entry['name'], ', '.join(str(d) for d in devices), device))
            if device in used:
                raise LayoutError('%s (%s) and %s_models[%d] (%s) both use device %s: give each model its own'
                                  % (where, entry['name'], var_prefix, used[device][0], used[device][1], device))
            if entry['name'] in names:
                raise LayoutError('%s: the served model name %s is used twice; names route requests and must be unique'
                                  % (where, entry['name']))
            used[device] = (pos, entry['name'])
            names.add(entry['name'])
            instances.append({'name': '%s-%s' % (prefix, slug(entry['name'])), 'devices': [device],
                              'model': entry, 'standby': False})
    for index, instance in enumerate(instances):
        instance['index'] = index
        instance['port'] = int(port_base) + index
        instance['unit'] = '%s.service' % instance['name']
    return instances
