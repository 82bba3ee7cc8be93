#!/usr/bin/env bash
# Install or upgrade shoal on a Debian or Ubuntu host:
#   - a system user `shoal` owning /var/lib/shoal (the data dir)
#   - a venv under /opt/shoal/venv with shoal installed from this source tree, its
#     dependencies at the versions in requirements.lock
#   - config in /etc/shoal (shoal.toml, shoal.env), never overwritten once present
#   - systemd/shoal.service installed, enabled and started
#   - the Spark maintenance jobs: Java (17 or 21, whichever the distribution has), the
#     [spark] extra, and the compaction, retention and rollup units with their timers
#     (enabled), unless --no-spark
# Run again from a newer source tree, it upgrades in place: the venv's packages, the
# units (config is kept), then restarts the running service.
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
#   --python P    interpreter for the venv (default python3; 3.11 to 3.14)
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
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown option $1" >&2; exit 2 ;;
    esac
done

PREFIX="$ROOT/opt/shoal"
VENV="$PREFIX/venv"
ETC="$ROOT/etc/shoal"
DATA="$ROOT/var/lib/shoal"
UNIT_DIR="$ROOT/etc/systemd/system"
JOBS=(compact retention rollup)
LOCK="$SOURCE/requirements.lock"
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
if [[ -z "$ROOT" && $DRY_RUN -eq 0 ]] && ! command -v systemctl >/dev/null 2>&1; then
    echo "install.sh: systemd is needed to run shoal as a service (no systemctl here);" \
        "use --root DIR to lay out the files only" >&2
    exit 2
fi

java_major() {  # the major version of the java on PATH, or nothing
    command -v java >/dev/null 2>&1 || return 0
    java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1
}

offered() {  # whether the distribution has a candidate version of package $1
    local candidate
    candidate="$(apt-cache policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: *//p')"
    [[ -n "$candidate" && "$candidate" != "(none)" ]]
}

pick_jre() {  # the first of OpenJDK 21 and 17 the distribution offers
    local pkg
    for pkg in openjdk-21-jre-headless openjdk-17-jre-headless; do
        if offered "$pkg"; then
            echo "$pkg"
            return
        fi
    done
    [[ $DRY_RUN -eq 1 ]] && echo "openjdk-21-jre-headless|openjdk-17-jre-headless"
}

headers_package() {  # the distribution's package with the headers of $PYTHON, if any
    local pkg
    pkg="$(basename "$PYTHON")-dev"
    [[ "$pkg" =~ ^python3(\.[0-9]+)?-dev$ ]] || pkg=python3-dev
    if offered "$pkg" || [[ $DRY_RUN -eq 1 ]]; then
        echo "$pkg"
    fi
}

# 1. System packages (a real host only). A C compiler and the interpreter's headers
# build the scanners in C of remote-write and OTLP metrics requests with shoal itself.
if [[ -z "$ROOT" ]]; then
    run apt-get update -q
    PACKAGES=(python3 python3-venv python3-pip gcc libc6-dev)
    HEADERS="$(headers_package)"
    if [[ -n "$HEADERS" ]]; then
        PACKAGES+=("$HEADERS")
    else
        echo "= no headers package for $PYTHON here: shoal decodes requests in Python" >&2
    fi
    if [[ $NO_SPARK -eq 0 ]]; then
        case "$(java_major)" in
            17|21) echo "= java $(java_major) is installed" ;;
            *)
                JRE="$(pick_jre)"
                if [[ -z "$JRE" ]]; then
                    echo "install.sh: neither openjdk-21-jre-headless nor openjdk-17-jre-headless" \
                        "is available; install Java 17 or 21, or pass --no-spark" >&2
                    exit 2
                fi
                PACKAGES+=("$JRE")
                ;;
        esac
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
if [[ $DRY_RUN -eq 0 ]]; then
    if ! "$PYTHON" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 14))'; then
        echo "install.sh: $PYTHON is not Python 3.11 to 3.14; pass --python" >&2
        exit 2
    fi
fi
installed_version() {
    [[ -x "$VENV/bin/python" ]] || return 0
    "$VENV/bin/python" -c 'from importlib import metadata as m; print(m.version("shoal"))' \
        2>/dev/null || true
}
BEFORE="$(installed_version)"
run install -d -m 0755 "$PREFIX"
if [[ ! -x "$VENV/bin/python" ]]; then
    run "$PYTHON" -m venv "$VENV"
fi
if [[ $NO_DEPS -eq 0 ]]; then
    run "$VENV/bin/python" -m pip install --quiet --upgrade pip
    # dependencies at the locked versions (added, upgraded or downgraded to match)
    run "$VENV/bin/python" -m pip install --quiet --constraint "$LOCK" "$PACKAGE"
fi
# shoal itself, rebuilt from this tree even when its version number did not change
run "$VENV/bin/python" -m pip install --quiet --no-deps --force-reinstall "$SOURCE"
AFTER="$(installed_version)"
if [[ $DRY_RUN -eq 0 ]]; then
    if "$VENV/bin/python" -c 'import shoal.otlp._scan, shoal.promwrite._scan' 2>/dev/null; then
        echo "= the scanners in C are built"
    else
        echo "install.sh: warning: the scanners in C were not built (no C compiler or no" \
            "Python headers): requests are decoded in Python, correct but slower" >&2
    fi
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

# 6. Enable and start, or restart after an upgrade. Under --root the systemctl steps are
# only listed; on a host where systemd is installed but not running (a chroot, an image
# build) the units are enabled but nothing is started or reloaded.
OFFLINE=0
if [[ -z "$ROOT" && $DRY_RUN -eq 0 && ! -d /run/systemd/system ]]; then
    OFFLINE=1
fi
host() {
    if [[ -n "$ROOT" ]]; then
        echo "= under --root, not run: $*"
    else
        run "$@"
    fi
}
live() {  # systemctl actions that need a running systemd
    if [[ $OFFLINE -eq 1 ]]; then
        echo "= systemd is not running here, not run: $*"
    else
        host "$@"
    fi
}
enable() {  # enable (offline too), and start unless --no-start
    if [[ $NO_START -eq 1 || $OFFLINE -eq 1 ]]; then
        host systemctl enable "$1"
    else
        host systemctl enable --now "$1"
    fi
}
live systemctl daemon-reload
enable shoal.service
if [[ -n "$BEFORE" && $NO_START -eq 0 ]]; then
    # an upgrade: a running server picks up the new code (SIGTERM drains and flushes
    # first); a stopped one stays stopped
    live systemctl try-restart shoal.service
fi
if [[ $NO_SPARK -eq 0 ]]; then
    for job in "${JOBS[@]}"; do
        enable "shoal-$job.timer"
    done
fi

# 7. What happened and what next.
echo
if [[ -n "$BEFORE" ]]; then
    echo "shoal upgraded in place: $BEFORE -> ${AFTER:-?} in $VENV${ROOT:+ (under $ROOT)}"
    if [[ -z "$ROOT" && $NO_START -eq 0 && $OFFLINE -eq 0 ]]; then
        echo "  shoal.service restarted if it was running: journalctl -u shoal -n 20"
    fi
else
    echo "shoal${AFTER:+ $AFTER} installed in $VENV${ROOT:+ (under $ROOT)}"
    echo "Next steps:"
    echo "  1. settings: $ETC/shoal.toml (every key in $PREFIX/src/docs/configuration.md)"
    echo "  2. a token for senders and queries of a tenant (both roles; printed once):"
    echo "       sudo -u shoal $VENV/bin/shoal token create --data-dir /var/lib/shoal \\"
    echo "           --tenant NAME --role ingest,query"
    echo "     and one for Prometheus scrapes of /metrics and the token API:"
    echo "       sudo -u shoal $VENV/bin/shoal token create --data-dir /var/lib/shoal \\"
    echo "           --tenant NAME --role admin"
    echo "  3. check it: curl -s http://127.0.0.1:4318/readyz ; journalctl -u shoal -n 20"
fi
