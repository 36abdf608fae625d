#!/usr/bin/env bash
# stop-services.sh stops the private PostgreSQL and ClickHouse servers that
# scripts/dev-services.sh started from .dev/ of this repository, and only
# those. Their data stays in .dev/; the next dev-services.sh starts them again.
# Servers it did not start (the system's, or ones named by DATABASE_URL /
# CLICKHOUSE_ADDR) are never touched.
#
# stop-services.sh --list stops nothing: it says which servers the last
# dev-services.sh chose (.dev/services.env), which of them are private
# servers still running, and how to stop those (`make demo` ends with it).
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)
DEV=$ROOT/.dev
CH_DIR=$DEV/clickhouse
CH_PID=$CH_DIR/clickhouse-server.pid

say() { printf '%s\n' "$*"; }
die() {
	printf 'stop-services: %s\n' "$*" >&2
	exit 1
}

# pid_is PIDFILE NAME TEXT prints the pid in PIDFILE when that process is alive
# (not a zombie waiting to be reaped), its command name starts with NAME and
# its command line contains TEXT.
pid_is() {
	local pid stat
	[[ -r $1 ]] || return 1
	pid=$(head -n 1 -- "$1" 2>/dev/null | tr -dc 0-9)
	[[ -n $pid ]] || return 1
	stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
	[[ $stat == "$pid ($2"* && ${stat##*) } != Z* ]] || return 1
	# Only the server started on our files, never one that reused the pid.
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$3" || return 1
	echo "$pid"
}

# wait_gone PID SECONDS waits for PID to exit.
wait_gone() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		[[ -d /proc/$1 ]] || return 0
		[[ $(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) == Z ]] && return 0
		sleep 0.1
	done
	return 1
}

stop_postgres() {
	local base data pid ver bin port
	base=$DEV/pg
	[[ -r $DEV/pg-location ]] && base=$(cat "$DEV/pg-location")
	data=$base/data
	port=$(cat "$base/port" 2>/dev/null || echo '?')
	if ! pid=$(pid_is "$data/postmaster.pid" postgres "$data"); then
		return 0
	fi
	ver=$(cat "$data/PG_VERSION" 2>/dev/null || true)
	bin=/usr/lib/postgresql/$ver/bin
	if [[ -n $ver && -x $bin/pg_ctl ]]; then
		if [[ $EUID -eq 0 ]]; then
			runuser -u postgres -- "$bin/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null 2>&1 || true
		else
			"$bin/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null 2>&1 || true
		fi
	fi
	if ! wait_gone "$pid" 1; then
		# pg_ctl missing or it failed: a fast shutdown by signal.
		kill -INT "$pid" 2>/dev/null || die "cannot signal private postgres (pid $pid); run this as its owner"
		wait_gone "$pid" 60 || die "private postgres (pid $pid) did not stop in 60 s"
	fi
	say "postgres: stopped private server on 127.0.0.1:$port"
}

stop_clickhouse() {
	local pid tcp=''
	pid=$(pid_is "$CH_PID" clickhouse "$CH_DIR/config.xml") || return 0
	[[ -r $CH_DIR/ports ]] && read -r tcp _ <"$CH_DIR/ports"
	kill -TERM "$pid" 2>/dev/null || die "cannot signal private clickhouse (pid $pid); run this as its owner"
	if ! wait_gone "$pid" 60; then
		kill -KILL "$pid" 2>/dev/null || true
		wait_gone "$pid" 10 || die "private clickhouse (pid $pid) did not stop"
	fi
	rm -f "$CH_PID"
	say "clickhouse: stopped private server on 127.0.0.1:${tcp:-?}"
}

# redact hides the password of a URL.
redact() { sed -E 's#(://[^:/@]*):[^@/]*@#\1:xxxxx@#' <<<"$1"; }

# env_get NAME prints NAME's value from .dev/services.env.
env_get() {
	[[ -r $DEV/services.env ]] || return 0
	(
		set +u
		# shellcheck disable=SC1091
		. "$DEV/services.env"
		printf '%s' "${!1}"
	)
}

# list says which servers are running for this checkout, stopping none.
list() {
	local base data port pid tcp='' private='' pg ch lines=()
	pg=$(env_get DATABASE_URL) ch=$(env_get CLICKHOUSE_ADDR)
	base=$DEV/pg
	[[ -r $DEV/pg-location ]] && base=$(cat "$DEV/pg-location")
	data=$base/data
	port=$(cat "$base/port" 2>/dev/null || echo '?')
	if pid=$(pid_is "$data/postmaster.pid" postgres "$data"); then
		lines+=("  postgres: private server on 127.0.0.1:$port (pid $pid, data in ${base#"$ROOT"/}), started by make services")
		private=1
	elif [[ -n $pg ]]; then
		lines+=("  postgres: $(redact "$pg") (not started from this checkout: left as it was)")
	fi
	if pid=$(pid_is "$CH_PID" clickhouse "$CH_DIR/config.xml"); then
		[[ -r $CH_DIR/ports ]] && read -r tcp _ <"$CH_DIR/ports"
		lines+=("  clickhouse: private server on 127.0.0.1:${tcp:-?} (pid $pid, data in ${CH_DIR#"$ROOT"/}), started by make services")
		private=1
	elif [[ -n $ch ]]; then
		lines+=("  clickhouse: $ch (not started from this checkout: left as it was)")
	fi
	if ((${#lines[@]} == 0)); then
		say "no private servers of this checkout are running"
		return 0
	fi
	say "servers still running:"
	printf '%s\n' "${lines[@]}"
	if [[ -n $private ]]; then
		say "make services-stop stops the private servers (their data stays in .dev/; make services starts them again)."
	fi
}

main() {
	if [[ ${1:-} == --list ]]; then
		list
		return 0
	fi
	[[ $# -eq 0 ]] || die "usage: stop-services.sh [--list]"
	[[ -d $DEV ]] || return 0
	# Wait for a dev-services.sh that may be starting a server right now.
	if command -v flock >/dev/null && [[ -e $DEV/services.lock ]]; then
		exec 9>>"$DEV/services.lock"
		flock -w 60 9 || printf 'stop-services: %s\n' "$DEV/services.lock is still held after 60 s; stopping anyway" >&2
	fi
	stop_postgres
	stop_clickhouse
	# The addresses may now point at stopped servers; dev-services.sh writes
	# them again.
	rm -f "$DEV/services.env"
}

main "$@"
