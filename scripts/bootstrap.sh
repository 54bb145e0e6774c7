#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian machine: system packages (as root), a virtual
# environment in .venv, and the project installed into it (editable, with dev extras).
# Sourced by scripts/demo and scripts/test; safe to run again at any time.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
APT_PACKAGES=(slurm-wlm slurm-client slurmdbd munge mariadb-server)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "[bootstrap] installing system packages: ${missing[*]}"
    # PID 1 is not systemd on these machines; keep the packages' own services from starting,
    # the project starts private daemons of its own.
    had_policy=0; [[ -e /usr/sbin/policy-rc.d ]] && had_policy=1
    [[ $had_policy -eq 1 ]] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; }
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
    [[ $had_policy -eq 1 ]] || rm -f /usr/sbin/policy-rc.d
  else
    echo "[bootstrap] missing system packages: ${missing[*]}" >&2
    echo "[bootstrap] run as root:  sudo apt-get install --no-install-recommends ${missing[*]}" >&2
    echo "[bootstrap] (without them only the fast test suite runs; Slurm tests are skipped)" >&2
  fi
fi

VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "[bootstrap] creating virtual environment in .venv"
  "$PY" -m venv "$VENV"
fi
stamp="$VENV/.installed-$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
if [[ ! -e "$stamp" ]]; then
  echo "[bootstrap] installing the project into .venv (editable, with dev extras)"
  "$VENV/bin/pip" install -q --disable-pip-version-check -e "$ROOT[dev]" 2> >(grep -v "is ignored: it is neither" >&2)
  rm -f "$VENV"/.installed-*
  touch "$stamp"
fi
export PATH="$VENV/bin:$PATH"

# The strict worker environment: where the local sites' workers run, as on a real site a
# Python with what docs/deploy.md tells a site to install (the Globus Compute endpoint, at
# the coordinator's versions) and nothing of this repository.
WORKER_VENV="$ROOT/.venv-worker"
pins="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(" ".join(f"{p}=={m.version(p)}" for p in ("globus-compute-endpoint", "globus-compute-sdk", "parsl", "dill")))')"
wstamp="$WORKER_VENV/.installed-$(echo "$pins" | sha256sum | cut -c1-16)"
if [[ ! -e "$wstamp" ]]; then
  echo "[bootstrap] creating the strict worker environment in .venv-worker ($pins)"
  rm -rf "$WORKER_VENV"
  "$PY" -m venv "$WORKER_VENV"
  # shellcheck disable=SC2086  # the pins are separate words
  "$WORKER_VENV/bin/pip" install -q --disable-pip-version-check $pins 2> >(grep -v "is ignored: it is neither" >&2)
  touch "$wstamp"
fi
export FEDERATION_WORKER_VENV="$WORKER_VENV"
