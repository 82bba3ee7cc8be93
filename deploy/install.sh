#!/usr/bin/env bash
# Install shoal on a fresh Debian or Ubuntu host:
#   - a system user `shoal` owning /var/lib/shoal (the data dir)
#   - a venv under /opt/shoal/venv with shoal installed from this source tree
#   - config in /etc/shoal (shoal.toml, shoal.env), never overwritten once present
#   - systemd/shoal.service installed, enabled and started
#   - the Spark maintenance jobs: Java 17, the [spark] extra, and the compaction,
#     retention and rollup units with their timers (enabled), unless --no-spark
#
# Usage: sudo deploy/install.sh [--root DIR] [--dry-run] [--no-deps] [--no-start]
#                               [--no-spark] [--python PYTHON] [--source DIR]
#   --root DIR    install under DIR instead of / (a throwaway root for testing);
#                 skips apt, the user account and systemctl
#   --dry-run     print every step without changing anything
#   --no-deps     install shoal without its dependencies (they are already present or
#                 come from elsewhere); mostly for tests
#   --no-start    enable the unit but do not start it
#   --no-spark    no Java, no [spark] extra, no maintenance timers (ingest and query only)
#   --python P    interpreter for the venv (default python3, 3.11 or 3.12)
#   --source DIR  the shoal source tree (default: the tree this script is in)
set -euo pipefail

ROOT=""
DRY_RUN=0
NO_DEPS=0
NO_START=0
NO_SPARK=0
PYTHON=python3
SOURCE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

while [[ $# -gt 0 ]]; do
    case "$1" in
        --root) ROOT="${2%/}"; shift 2 ;;
        --dry-run) DRY_RUN=1; shift ;;
        --no-deps) NO_DEPS=1; shift ;;
        --no-start) NO_START=1; shift ;;
        --no-spark) NO_SPARK=1; shift ;;
        --python) PYTHON="$2"; shift 2 ;;
        --source) SOURCE="$2"; shift 2 ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown option $1" >&2; exit 2 ;;
    esac
done

PREFIX="$ROOT/opt/shoal"
VENV="$PREFIX/venv"
ETC="$ROOT/etc/shoal"
DATA="$ROOT/var/lib/shoal"
UNIT_DIR="$ROOT/etc/systemd/system"
JOBS=(compact retention rollup)
PACKAGE="$SOURCE"
if [[ $NO_SPARK -eq 0 ]]; then
    PACKAGE="$SOURCE[spark]"
fi

run() {
    echo "+ $*"
    if [[ $DRY_RUN -eq 0 ]]; then
        "$@"
    fi
}

write_file() {  # write_file PATH MODE  (content on stdin; never overwrites)
    local path="$1" mode="$2"
    if [[ -e "$path" ]]; then
        echo "= keeping existing $path"
        cat >/dev/null
        return
    fi
    echo "+ write $path (mode $mode)"
    if [[ $DRY_RUN -eq 0 ]]; then
        cat >"$path"
        chmod "$mode" "$path"
    else
        cat >/dev/null
    fi
}

[[ -f "$SOURCE/pyproject.toml" && -d "$SOURCE/shoal" ]] || {
    echo "install.sh: $SOURCE is not a shoal source tree" >&2
    exit 2
}
if [[ -z "$ROOT" && $DRY_RUN -eq 0 && $EUID -ne 0 ]]; then
    echo "install.sh: run as root (or use --root DIR / --dry-run)" >&2
    exit 2
fi

# 1. System packages (a real host only).
if [[ -z "$ROOT" ]]; then
    run apt-get update -q
    PACKAGES=(python3 python3-venv python3-pip)
    if [[ $NO_SPARK -eq 0 ]]; then
        PACKAGES+=(openjdk-17-jre-headless)
    fi
    run env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${PACKAGES[@]}"
fi

# 2. The service account.
if [[ -z "$ROOT" ]]; then
    if ! id shoal >/dev/null 2>&1; then
        run useradd --system --home-dir /var/lib/shoal --no-create-home \
            --shell /usr/sbin/nologin --user-group shoal
    else
        echo "= user shoal exists"
    fi
fi

# 3. The venv and shoal itself.
run install -d -m 0755 "$PREFIX"
if [[ ! -x "$VENV/bin/python" ]]; then
    run "$PYTHON" -m venv "$VENV"
fi
if [[ $NO_DEPS -eq 1 ]]; then
    run "$VENV/bin/pip" install --quiet --no-deps "$SOURCE"
else
    run "$VENV/bin/pip" install --quiet --upgrade pip
    run "$VENV/bin/pip" install --quiet "$PACKAGE"
fi
run install -d -m 0755 "$PREFIX/src/docs"
run cp -r "$SOURCE/docs/." "$PREFIX/src/docs/"

# 4. Configuration (kept if present).
run install -d -m 0750 "$ETC"
write_file "$ETC/shoal.toml" 0640 <<'TOML'
# shoal settings; every key is documented in docs/operations.md and
# can also be set as SHOAL_<NAME> in /etc/shoal/shoal.env.
data_dir = "/var/lib/shoal"
bind = "127.0.0.1"
http_port = 4318
grpc_port = 4317
pg_port = 4319
wal_fsync = "always"
TOML
write_file "$ETC/shoal.env" 0640 <<'ENV'
# SHOAL_<NAME>=value overrides shoal.toml, for example:
# SHOAL_BIND=0.0.0.0
ENV

# 5. The data dir and the unit.
run install -d -m 0750 "$DATA"
if [[ -z "$ROOT" ]]; then
    run chown -R shoal:shoal "$DATA"
    run chgrp shoal "$ETC" "$ETC/shoal.toml" "$ETC/shoal.env"
fi
run install -d -m 0755 "$UNIT_DIR"
run install -m 0644 "$SOURCE/systemd/shoal.service" "$UNIT_DIR/shoal.service"
if [[ $NO_SPARK -eq 0 ]]; then
    for job in "${JOBS[@]}"; do
        run install -m 0644 "$SOURCE/systemd/shoal-$job.service" "$UNIT_DIR/shoal-$job.service"
        run install -m 0644 "$SOURCE/systemd/shoal-$job.timer" "$UNIT_DIR/shoal-$job.timer"
    done
fi

# 6. Enable and start (a real host only).
if [[ -z "$ROOT" ]]; then
    run systemctl daemon-reload
    if [[ $NO_START -eq 1 ]]; then
        run systemctl enable shoal.service
    else
        run systemctl enable --now shoal.service
    fi
    if [[ $NO_SPARK -eq 0 ]]; then
        for job in "${JOBS[@]}"; do
            run systemctl enable --now "shoal-$job.timer"
        done
    fi
    echo "shoal installed. Create an ingest token with:"
    echo "  sudo -u shoal SHOAL_DATA_DIR=/var/lib/shoal $VENV/bin/shoal token create --tenant NAME"
else
    echo "shoal installed under $ROOT"
fi
