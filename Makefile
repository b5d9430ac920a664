# The README's two commands: `make test` and `make demo`. Everything they need is set up here.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
BENCH_VENV := bench/.venv

.PHONY: test lint typecheck unit demo demo-onprem bench bench-ha bench-quick lease-soak lease-replica-soak liveness-soak never-two-soak provisioner-idle-soak ha-soak ha-failover clean system-deps e2e-deps packages

# Debian 12 ships python3 without venv/ensurepip; install it when we can (root), else say how.
system-deps:
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip >/dev/null; \
	  else echo "need python3-venv: run 'sudo apt-get install python3-venv'" >&2; exit 1; fi; }

$(STAMP): pyproject.toml | system-deps
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,controller]'
	touch $@

lint: $(STAMP)
	$(VENV)/bin/ruff check xce_protocol xce_agent xce_controller xce_provisioner tests bench packaging/python
	$(VENV)/bin/ruff format --check xce_protocol xce_agent xce_controller xce_provisioner tests bench packaging/python
	$(VENV)/bin/lint-imports

typecheck: $(STAMP)
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

test: lint typecheck $(STAMP) $(BENCH_VENV)/bin/supervisord
	$(PY) -m pytest -q --durations=30 tests

demo: $(STAMP)
	$(VENV)/bin/xce-agent demo

# The on-premise story: a Redfish emulator, xce-provisioner powering a machine on and off.
demo-onprem: $(STAMP)
	$(VENV)/bin/xce-controller demo --onprem


# supervisord, the peer of the supervision benchmark, lives in its own venv from PyPI.
$(BENCH_VENV)/bin/supervisord: | system-deps
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install -q supervisor

# Every section at full size; the README's tables (between its bench markers) are replaced
# with what this run printed, so they all come from one run (see README, "Benchmarks").
bench: $(STAMP) $(BENCH_VENV)/bin/supervisord
	$(PY) -m bench --readme README.md

# The replicas on PostgreSQL beside the single SQLite process at 5,000 and 10,000 hosts (most
# of an hour on two cores): its own target, its own table in the README.
bench-ha: $(STAMP)
	$(PY) -m bench ha --readme README.md

# Every bench section at tiny sizes, asserting each one runs and prints its table (under two
# minutes on two cores; `make test` runs it too).
bench-quick: $(STAMP) $(BENCH_VENV)/bin/supervisord
	$(PY) -m pytest -q tests/integration/test_bench_quick.py

# The lease checker at length (tests/integration/test_lease_checker.py runs 40 schedules in
# `make test`, every controller fault among them); SCHEDULES=N changes the count, SEED=S draws
# a run's schedules again (the faults' timing still differs). `make bench` runs 100 and puts
# its table in the README.
SCHEDULES ?= 500
lease-soak: $(STAMP)
	$(PY) -m bench leases --schedules $(SCHEDULES) $(if $(SEED),--seed $(SEED))

# The same with the controller as two replicas on PostgreSQL, replica kills and database
# failovers among the faults (tests/integration/test_lease_replicas.py runs 12 in `make test`).
REPLICA_SCHEDULES ?= 100
lease-replica-soak: $(STAMP)
	XCE_LEASE_REPLICA_SCHEDULES=$(REPLICA_SCHEDULES) $(PY) -m pytest -q -s tests/integration/test_lease_replicas.py

# The liveness checker at length: random schedules of replica kills, stops and database cuts,
# the whole database stopped, hosts silenced, against three replicas on PostgreSQL
# (tests/integration/test_liveness_checker.py runs 1 in `make test`); SEED=S replays from S.
LIVENESS_SCHEDULES ?= 30
liveness-soak: $(STAMP)
	XCE_LIVENESS_SCHEDULES=$(LIVENESS_SCHEDULES) $(if $(SEED),XCE_LIVENESS_SEED=$(SEED)) \
	  $(PY) -m pytest -q -s tests/integration/test_liveness_checker.py

# The failover tests measured longer: 5,000 simulated hosts heartbeating through three replicas
# on PostgreSQL while the primary is killed and its standby promoted, then while a replica is
# killed, for 90 s after the fault (`make test` measures 60 s); FAILOVER_HOSTS=N changes the size.
FAILOVER_HOSTS ?= 5000
ha-failover: $(STAMP)
	XCE_FAILOVER_HOSTS=$(FAILOVER_HOSTS) XCE_FAILOVER_AFTER=90 $(PY) -m pytest -q -s \
	  tests/integration/test_ha_failover.py

# Never two copies of a component at length (tests/integration/test_never_two_checker.py runs
# 40 schedules in `make test`, more if the seed's first 40 miss a step); needs root, mount(8)
# and cgroup v2. SEED=S replays a run;
# `$(PY) -m bench never-two --seed S --first I --schedules 1 --lanes 1` replays one schedule.
never-two-soak: $(STAMP)
	$(PY) -m bench never-two --schedules $(SCHEDULES) $(if $(SEED),--seed $(SEED))

# The provisioner's memory over an hour of idle passes on a fast clock (about 2 minutes here);
# tests/integration/test_provisioner_idle_memory.py runs 400 of them in `make test`.
PASSES ?= 3600
provisioner-idle-soak: $(STAMP)
	$(PY) -m bench provisioner-idle --passes $(PASSES)

# Controller replicas on a Patroni (+ etcd) cluster whose leader is killed -9, ROUNDS times
# (3 by default); needs root and Debian's patroni, etcd-server and postgresql. Its figures are
# in the README and docs/ha.md.
ROUNDS ?= 3
ha-soak: $(STAMP)
	$(PY) -m bench ha-soak --schedules $(ROUNDS)

# What the end-to-end test (real systemd + cloud-init in systemd-nspawn), the packaging
# checks, the metrics checks (promtool, from prometheus), the status page's browser test
# (chromium, chromium-driver), the load-balancer test (haproxy) and the PostgreSQL store's tests
# (postgresql, and faketime for a replica with a wrong clock) need; without them `make test`
# skips those tests and says why.
E2E_DEBS := debootstrap systemd-container zstd debhelper dh-python pybuild-plugin-pyproject \
	python3-all python3-setuptools lintian rpm rpmlint cpio python3-installer python3-pip \
	python3-wheel prometheus chromium chromium-driver haproxy postgresql faketime python3-click \
	python3-yaml python3-requests python3-psutil zsh fish groff-base
e2e-deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends $(E2E_DEBS) >/dev/null; \
	else echo "e2e-deps: needs root and apt-get; install: $(E2E_DEBS)" >&2; fi

packages:
	packaging/build-deb.sh dist
	packaging/build-rpm.sh dist

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
