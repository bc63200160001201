#!/usr/bin/env bash
# Prepares a machine for building and testing PyPTO: system packages (GoogleTest, compiler,
# Python headers) and a virtual environment with the Python dependencies.
# Idempotent: `make setup` calls it only when its stamp file is missing or out of date.
#
# Environment: VENV (default .venv), PYTHON (interpreter that creates the venv, default python3),
#              PY_PKGS (pip requirements), STAMP (file written on success).
set -euo pipefail

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
PY_PKGS=${PY_PKGS:-numpy torch==2.13.0 nanobind scikit-build-core pytest hypothesis ninja cmake matplotlib tqdm}
STAMP=${STAMP:-$VENV/.pypto-setup}

log() { printf '[setup] %s\n' "$*"; }

apt_updated=0
apt_install() {
  # Installs Debian packages; refreshes the package lists once if the first attempt fails.
  if ! command -v apt-get >/dev/null 2>&1; then
    log "apt-get not available; please install: $*"; return 1
  fi
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      log "not root and no sudo; please install: $*"; return 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  log "apt-get install $*"
  if ! $sudo apt-get install -y --no-install-recommends "$@" </dev/null; then
    if [ $apt_updated -eq 0 ]; then
      $sudo apt-get update </dev/null
      apt_updated=1
    fi
    $sudo apt-get install -y --no-install-recommends "$@" </dev/null
  fi
}

deb_installed() { dpkg -s "$1" >/dev/null 2>&1; }

# --- system packages -----------------------------------------------------------------------------
missing=()
if command -v dpkg >/dev/null 2>&1; then
  deb_installed libgtest-dev || missing+=(libgtest-dev)
  # The build needs a C++ compiler, and the CPU backend calls `c++` at run time.
  command -v c++ >/dev/null 2>&1 || missing+=(g++)
  command -v make >/dev/null 2>&1 || missing+=(make)
fi
if [ ${#missing[@]} -gt 0 ]; then
  apt_install "${missing[@]}"
fi

# --- virtual environment -------------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV with $PYTHON"
  if ! "$PYTHON" -m venv "$VENV"; then
    # Debian's own python3 ships venv/ensurepip separately.
    rm -rf "$VENV"
    pyver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    apt_install "python${pyver}-venv" || apt_install python3-venv
    "$PYTHON" -m venv "$VENV"
  fi
fi
VPY="$VENV/bin/python"

# Python headers for the extension module (a Debian python3 needs python3.X-dev).
has_headers=$("$VPY" -c 'import os, sysconfig; print(int(os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))))')
if [ "$has_headers" != 1 ]; then
  pyver=$("$VPY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  apt_install "python${pyver}-dev" || apt_install python3-dev
fi

# --- Python packages -----------------------------------------------------------------------------
# torch==2.13.0: a CPU build is provided to pip through its configured find-links/index.
log "pip install $PY_PKGS"
# shellcheck disable=SC2086
"$VPY" -m pip install --disable-pip-version-check --prefer-binary -q $PY_PKGS

"$VPY" - <<'PYEOF'
import importlib
for mod in ("numpy", "torch", "nanobind", "pytest", "hypothesis"):
    importlib.import_module(mod)
import torch
print("[setup] python ok: torch", torch.__version__)
PYEOF

mkdir -p "$(dirname "$STAMP")"
date >"$STAMP"
log "done"
