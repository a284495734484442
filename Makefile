# EnSIMem reproduction harness. `make help` lists the targets.
# Every stage resumes from its artifacts and every LLM call is cached, so re-running a target
# only does what is missing.

VENV    ?= .venv
PY      ?= $(if $(wildcard $(VENV)/bin/python),$(VENV)/bin/python,python3)
CONFIG  ?= configs/locomo.yaml
RUN     ?=
LIMIT   ?=
CONVS   ?=
SET     ?=
LOCOMO_URL    := https://raw.githubusercontent.com/snap-research/locomo/main/data/locomo10.json
LOCOMO_SHA256 := 79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4

ARGS = --config $(CONFIG) $(if $(RUN),--run $(RUN)) $(if $(LIMIT),--limit $(LIMIT)) \
       $(if $(CONVS),--conversations $(CONVS)) $(foreach s,$(SET),--set $(s))
LOCOMO_STAGES = 01_preprocess 02_episodes 03_extract 04_index 05_plan 06_retrieve 07_answer 08_judge 09_aggregate

.PHONY: help install data locomo judge2 test clean-run $(addprefix locomo-,$(LOCOMO_STAGES))

help:  ## list targets
	@grep -E '^[a-zA-Z0-9_%-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | sort

install:  ## create .venv and install the pinned requirements
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q torch==2.13.0
	$(VENV)/bin/pip install -q -r requirements.txt

data: data/locomo10.json  ## download locomo10.json (CC BY-NC 4.0) and check its sha256

data/locomo10.json:
	mkdir -p data
	curl -fsSL -o $@.part $(LOCOMO_URL)
	echo "$(LOCOMO_SHA256)  $@.part" | sha256sum -c -
	mv $@.part $@

locomo:  ## the full LoCoMo pipeline 01-09 (CONFIG, RUN, LIMIT, CONVS, SET="k=v ...")
	@set -e; for s in $(LOCOMO_STAGES); do $(PY) -m LoCoMo.$$s $(ARGS); done

locomo-%:  ## one LoCoMo stage, e.g. make locomo-06_retrieve
	$(PY) -m LoCoMo.$* $(ARGS)

judge2:  ## second judge (Qwen3-32B via an OpenAI-compatible server) on the same answers
	$(PY) -m LoCoMo.08_judge $(ARGS) --config configs/judge_qwen3_32b.yaml
	$(PY) -m LoCoMo.09_aggregate $(ARGS)

test:  ## the offline test-suite (a local fake OpenAI server; no network, no key)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

clean-run:  ## delete results/<benchmark>/<RUN> (never the LLM cache)
	@test -n "$(RUN)" || (echo "set RUN=<name>"; exit 1)
	rm -rf results/locomo/$(RUN)
