# skyplane-ops — the two commands a newcomer runs are `make demo` and `make test`.
# Everything they need is installed here, into ./.venv and ./.cache, by the commands themselves.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test e2e lint typecheck unit tools venv clean bench docs

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[all,dev]'
	touch $(STAMP)

## Test tools that are not Python packages (sshd, iperf3, rclone, Azurite): scripts/install-test-tools.sh
tools:
	bash scripts/install-test-tools.sh

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy

unit: venv
	$(BIN)/pytest -q tests/unit

# The end-to-end deployments (Airflow on Celery, Dagster's daemon, airflow standalone) mostly
# wait on their services, so they run beside the rest of the suite, not after it (pytest gives
# each session its own numbered temporary folder); either failing fails the target, the e2e
# log printed after.
test: venv tools lint typecheck
	@mkdir -p .cache
	PATH="$(CURDIR)/$(BIN):$$PATH"; export PATH; \
	$(BIN)/pytest -q -ra tests/e2e > .cache/e2e.log 2>&1 & e2e=$$!; \
	$(BIN)/pytest -q -ra --ignore=tests/e2e; rest=$$?; \
	wait $$e2e; e2e_rc=$$?; echo "== tests/e2e (run beside the rest):"; cat .cache/e2e.log; \
	test $$rest -eq 0 && test $$e2e_rc -eq 0

# The end-to-end tests alone (also part of `make test`): airflow standalone + dagster CLI, and the
# deployments: Airflow on Celery (Postgres, Redis, two workers), dagster-daemon on Postgres (~7 min).
e2e: venv
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q -ra tests/e2e

demo: venv
	PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/demo.sh

bench: venv
	for b in benchmarks/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .cache build dist site *.egg-info .mypy_cache .ruff_cache .pytest_cache

# The documentation site (MkDocs Material + mkdocstrings), warnings as errors, into ./site.
docs: venv
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(BIN)/mkdocs build --strict --site-dir site
