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
SCENARIOS ?= $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml)))

export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

.PHONY: help
help:
	@echo "make test   install what is needed, then lint, sanity, unit tests and Molecule scenarios"
	@echo "make demo   run playbooks/site.yml against a disposable container with two simulated GPUs"
	@echo "make bench  measure gpu_facts, preflight and the driver/toolkit/runtime roles (docs/benchmarks.md)"

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
unit: venv host
	$(BIN)/pytest tests/unit

.PHONY: molecule
molecule: venv image nvml-double wheels nvidia-repo
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
demo: venv image nvml-double wheels nvidia-repo
	LLM_SERVER_TEST_IMAGE=$$(cat $(IMAGE_FILE)) bash scripts/demo.sh

.PHONY: bench
bench: venv image nvml-double wheels nvidia-repo
	LLM_SERVER_TEST_IMAGE=$$(cat $(IMAGE_FILE)) $(BIN)/python benchmarks/foundation.py
	LLM_SERVER_TEST_IMAGE=$$(cat $(IMAGE_FILE)) $(BIN)/python benchmarks/runtime_roles.py

.PHONY: build
build: venv
	$(BIN)/ansible-galaxy collection build --force --output-path $(BUILD)

.PHONY: clean
clean:
	rm -rf $(BUILD) .cache tests/output
