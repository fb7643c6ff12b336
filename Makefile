# homelab.llm_server: the two commands are `make test` and `make demo`.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
BUILD := build
NVML_DOUBLE := $(BUILD)/nvml/libnvidia-ml.so.1
WHEELS := $(BUILD)/wheels
IMAGE_FILE := $(BUILD)/test-image
# llama.cpp comes from the llama-cpp-python sdist on PyPI, which vendors its
# full source; LLAMACPP_COMMIT is the llama.cpp commit that sdist vendors
# (the build checks it) and names the archive, so a new pin builds anew.
LLAMACPP_SDIST_VERSION := 0.3.36
LLAMACPP_SDIST_SHA256 := 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
LLAMACPP_COMMIT := 0c1e570
LLAMACPP_ARCHIVE := $(BUILD)/llamacpp/llama.cpp-$(LLAMACPP_COMMIT)-linux-$(shell uname -m)-cpu.tar.gz
TINY_MODEL := $(BUILD)/models/tiny-chat.gguf
SCENARIOS ?= $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml)))

export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

.PHONY: help
help:
	@echo "make test   install what is needed, then lint, sanity, unit tests and Molecule scenarios"
	@echo "make demo   run playbooks/site.yml against a disposable container with two simulated GPUs"
	@echo "make bench  measure gpu_facts, preflight, the driver/toolkit/runtime roles, llm-bench and the proxy (docs/benchmarks.md)"

# Python tooling, rebuilt when requirements.txt changes.
$(BIN)/.installed: requirements.txt
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

$(NVML_DOUBLE): tests/nvml_double/fake_nvml.c tests/nvml_double/Makefile
	$(MAKE) -C tests/nvml_double OUT=$(CURDIR)/$(BUILD)/nvml

.PHONY: nvml-double
nvml-double: $(NVML_DOUBLE)

# Local signed apt repositories standing in for NVIDIA's (CUDA and
# libnvidia-container), with the real package names; build.py skips the
# work when its inputs are unchanged.
.PHONY: nvidia-repo
nvidia-repo: host
	python3 tests/nvidia_repo/build.py $(BUILD)/nvidia-repo

# Wheels of the target-side Python dependencies, installed into the test
# containers without an index (containers cannot verify TLS to PyPI here).
$(WHEELS)/.done: requirements.txt | venv
	mkdir -p $(WHEELS)
	$(BIN)/pip download --quiet --no-deps --only-binary=:all: -d $(WHEELS) \
	  "$$(grep -E '^nvidia-ml-py==' requirements.txt)"
	touch $@

.PHONY: wheels
wheels: $(WHEELS)/.done

# Prebuilt CPU llama-server for the llamacpp role and the serving tests. The
# build takes about 11 minutes on 2 CPUs, so an existing archive is kept even
# when the build scripts change (make clean, or delete it, to rebuild).
$(LLAMACPP_ARCHIVE): | venv host
	mkdir -p $(@D)
	bash scripts/build-llamacpp.sh $(LLAMACPP_SDIST_VERSION) $(LLAMACPP_SDIST_SHA256) $(LLAMACPP_COMMIT) $@

.PHONY: llamacpp
# Stable names for the scenarios and the demo: the archive and its version.
llamacpp: $(LLAMACPP_ARCHIVE)
	ln -sfn $(notdir $(LLAMACPP_ARCHIVE)) $(BUILD)/llamacpp/llama-server-cpu.tar.gz
	echo $(LLAMACPP_COMMIT) > $(BUILD)/llamacpp/llama-server-cpu.version

# A tiny random-weight chat model, generated, never downloaded (tests/gguf_model).
$(TINY_MODEL): tests/gguf_model/make_tiny_model.py | venv
	$(BIN)/python tests/gguf_model/make_tiny_model.py $@

.PHONY: tiny-model
tiny-model: $(TINY_MODEL)

.PHONY: image
image: host
	mkdir -p $(BUILD)
	bash scripts/build-test-image.sh > $(IMAGE_FILE)
	@echo "test image: $$(cat $(IMAGE_FILE))"

.PHONY: lint
lint: venv
	$(BIN)/ansible-lint --profile production

.PHONY: sanity
sanity: venv
	bash scripts/sanity.sh

.PHONY: unit
unit: venv host llamacpp tiny-model
	$(BIN)/pytest tests/unit

.PHONY: molecule
molecule: venv image nvml-double wheels nvidia-repo llamacpp tiny-model
	export LLM_SERVER_TEST_IMAGE=$$(cat $(IMAGE_FILE)); \
	for s in $(SCENARIOS); do \
	  echo "=== molecule scenario $$s ==="; \
	  $(BIN)/molecule test -s $$s; \
	done

.PHONY: galaxy
galaxy: venv nvml-double
	bash scripts/check-galaxy-build.sh

.PHONY: test
test: venv host lint sanity unit galaxy molecule
	@echo "make test: all checks passed"

.PHONY: demo
demo: venv image nvml-double wheels nvidia-repo llamacpp tiny-model
	LLM_SERVER_TEST_IMAGE=$$(cat $(IMAGE_FILE)) bash scripts/demo.sh

.PHONY: bench
bench: venv image nvml-double wheels nvidia-repo
	LLM_SERVER_TEST_IMAGE=$$(cat $(IMAGE_FILE)) $(BIN)/python benchmarks/foundation.py
	LLM_SERVER_TEST_IMAGE=$$(cat $(IMAGE_FILE)) $(BIN)/python benchmarks/runtime_roles.py
	$(BIN)/python benchmarks/loadbench_ceiling.py
	LLM_SERVER_TEST_IMAGE=$$(cat $(IMAGE_FILE)) $(BIN)/python benchmarks/front_door.py

.PHONY: build
build: venv
	$(BIN)/ansible-galaxy collection build --force --output-path $(BUILD)

.PHONY: clean
clean:
	rm -rf $(BUILD) .cache tests/output
