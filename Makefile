# The two commands a newcomer needs: `make demo` and `make test`.
# Both set up everything themselves, idempotently: a virtualenv with the pinned
# dependencies of pyproject.toml, and Debian's zookeeper, chromium and chromium-driver
# packages when missing.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
ZK_JAR := /usr/share/java/zookeeper.jar
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=

.PHONY: demo test test-deep lint proto bench setup zookeeper browser spark-classes clean

demo: setup
	$(BIN)/pulsar-ref demo

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-deep: setup
	$(BIN)/python -m pytest -m deep $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy pulsar_ref impl conformance spark

setup: $(STAMP) zookeeper browser spark-classes

# Spark's classes archived once for faster local audits (spark/classes.py); an audit works without it.
spark-classes: $(STAMP) zookeeper
	-@$(BIN)/python -m spark.classes

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

zookeeper:
	@if [ ! -f $(ZK_JAR) ] || ! command -v java >/dev/null; then \
	  echo "installing Debian's zookeeper package (brings Java)"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null; \
	fi

# Debian's headless Chromium and its WebDriver: the cluster view's browser tests drive them.
browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  echo "installing Debian's chromium and chromium-driver (the browser tests)"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	fi

# Regenerate the protobuf/gRPC modules (committed, so a plain pip install works).
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --pyi_out=. \
	  $$(find impl -name '*.proto')

bench: setup
	@for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build *.egg-info
