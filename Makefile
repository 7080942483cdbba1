# Two entry points for a fresh machine (see README.md):
#   make demo  - install everything, start a local Kafka broker, sink sample events into a local Delta table
#                (DEMO_ARGS=--s3: the table on a local S3 server; DEMO_ARGS=--cdc: a PostgreSQL database mirrored
#                through Debezium into Delta tables, each compared with its database table)
#   make test  - install everything and run the whole test suite against a real broker and real Delta tables
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup postgresql demo test testkit unit lint clean-cache kafka-start kafka-stop registry-start registry-stop bench

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "lakesink needs Python 3.10 or newer: install it and run make again.")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

setup: $(STAMP) postgresql
	$(BIN)/lakesink deps

# PostgreSQL's server programs, for the database mirror (connector/local/postgres.py starts its own server from them):
# Debian's `postgresql` package, installed when neither pg_ctl on PATH nor Debian's /usr/lib/postgresql/*/bin has them.
postgresql:
	@command -v pg_ctl >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || \
	  { command -v apt-get >/dev/null 2>&1 && { DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null 2>&1; }; }; } || \
	  { echo "PostgreSQL is missing and could not be installed: install Debian's postgresql package (apt-get install postgresql) and run make again." >&2; exit 1; }

demo: setup
	$(BIN)/lakesink demo $(DEMO_ARGS)

# The suite runs in TEST_WORKERS processes (pytest-xdist), each with its own broker, S3 server, registry and Spark
# session. Two workers leave the two cores idle about a fifth of the time (1,557 s in the work tree). Three kept them
# busy and took 1,357 s there, but on a fresh clone 1,610 s and then 1,841 s, where four timing-bound tests
# failed (a producer timing out through a broker restart, kills that came too late): two until those hold under load.
TEST_WORKERS ?= 2

test: setup lint testkit
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

# The test kit's reference producers: the Java helper around Kafka's own JsonConverter (testkit/connect_records.py),
# fetched from Maven Central and compiled once into .cache/.
testkit: $(STAMP)
	$(BIN)/python -c 'from testkit.connect_records import helper_classpath; helper_classpath()'

# The import contracts in pyproject.toml: the architecture's arrows (docs/ARCHITECTURE.md).
lint: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/ruff check --quiet

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

kafka-start: setup
	$(BIN)/lakesink kafka start

kafka-stop: $(STAMP)
	$(BIN)/lakesink kafka stop

registry-start: setup
	$(BIN)/lakesink registry start

registry-stop: $(STAMP)
	$(BIN)/lakesink registry stop

# Every goal of the performance work in one run, its figures against baselines of the same run on the last lines
# (bench/goals.py; BENCH_ARGS="--quick" for development sizes). One bench alone: .venv/bin/python bench/run.py --help.
bench: setup
	$(BIN)/python bench/goals.py $(BENCH_ARGS)
