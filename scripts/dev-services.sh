#!/usr/bin/env bash
# dev-services.sh makes PostgreSQL and ClickHouse reachable for `make test`
# and `make demo`, and writes their addresses to .dev/services.env:
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
#   CLICKHOUSE_ADDR=127.0.0.1:29000          (native protocol)
#   CLICKHOUSE_HTTP=http://127.0.0.1:28123
#
# For each server, in order:
#   1. DATABASE_URL / CLICKHOUSE_ADDR (and CLICKHOUSE_HTTP) set in the
#      environment: use them; fail, naming the variable, if they do not answer.
#   2. A server on the default local port that lets us in (PostgreSQL
#      127.0.0.1:5432 as user postgres without a password, ClickHouse
#      127.0.0.1:9000): use it.
#   3. Otherwise a private server on free local ports with its data in .dev/,
#      installing Debian's packages with apt-get when they are missing. A
#      later run reuses it, or restarts it if it died.
#
# It also installs Debian's nats-server package when /usr/sbin/nats-server is
# missing: the tests run it as a server too old for fairway (2.9.10 in
# Debian 12; internal/operating). fairway itself runs on the newer
# nats-server `make nats` installs.
#
# FAIRWAY_PRIVATE_SERVICES=1 skips step 2. scripts/stop-services.sh stops the
# private servers. System services are never started, stopped or configured.
#
# Quiet when all is well: it prints what it installs or starts, warnings and
# errors; which servers it found is printed only with
# FAIRWAY_SERVICES_VERBOSE=1 (and is in .dev/services.env).
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)
DEV=$ROOT/.dev
ENV_FILE=$DEV/services.env
APT_LOG=$DEV/apt.log
FORCE_PRIVATE=${FAIRWAY_PRIVATE_SERVICES:-}
[[ $FORCE_PRIVATE == 0 ]] && FORCE_PRIVATE=

PG_DEFAULT_URL='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable'
# Below Linux's ephemeral range (32768-60999 by default): a port there can be
# taken as the local end of any outgoing connection between our check and the
# server's bind ("Address already in use", seen with a busy test run).
# And within 25000-29999, which the tests' testenv.FreePort never hands out
# (TestFreePortSkipsPrivateServicesPorts).
PG_PORT_FIRST=25432
CH_TCP_FIRST=29000
CH_HTTP_FIRST=28123
CH_INTERSERVER_FIRST=29009
WAIT_SECONDS=60

say() { printf '%s\n' "$*"; }
info() { if [[ ${FAIRWAY_SERVICES_VERBOSE:-} == 1 ]]; then say "$@"; fi; }
warn() { printf 'dev-services: %s\n' "$*" >&2; }
die() {
	printf 'dev-services: %s\n' "$*" >&2
	exit 1
}

# redact hides the password of a URL.
redact() { sed -E 's#(://[^:/@]*):[^@/]*@#\1:xxxxx@#' <<<"$1"; }

# port_open HOST PORT succeeds when something accepts TCP connections there.
port_open() {
	# shellcheck disable=SC2016 # expanded by the inner bash
	timeout 2 bash -c ': >"/dev/tcp/$0/$1"' "$1" "$2" 2>/dev/null
}

# free_port FIRST [EXCEPT...] prints the first port from FIRST up that nothing
# listens on and that is not one of EXCEPT.
free_port() {
	local p=$1 x taken
	shift
	for ((; p < 65535; p++)); do
		taken=
		for x in "$@"; do [[ $p == "$x" ]] && taken=1; done
		[[ -z $taken ]] && ! port_open 127.0.0.1 "$p" && {
			echo "$p"
			return 0
		}
	done
	return 1
}

# pid_is PIDFILE NAME TEXT prints the pid in PIDFILE when that process is alive
# (not a zombie waiting to be reaped), its command name starts with NAME and
# its command line contains TEXT.
pid_is() {
	local pid stat
	[[ -r $1 ]] || return 1
	pid=$(head -n 1 -- "$1" 2>/dev/null | tr -dc 0-9)
	[[ -n $pid ]] || return 1
	# /proc/PID/stat: "PID (COMM) STATE ..."
	stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
	[[ $stat == "$pid ($2"* && ${stat##*) } != Z* ]] || return 1
	# Only the server started on our files, never one that reused the pid.
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$3" || return 1
	echo "$pid"
}

# as_root runs a command as root, directly or through passwordless sudo.
as_root() {
	if [[ $EUID -eq 0 ]]; then
		"$@"
	else
		sudo -n "$@"
	fi
}

APT_UPDATED=
# apt_install PKG... installs Debian packages without prompting. A failing
# postinst (it may try to start a system service) is not fatal here: callers
# check for the binaries they need.
apt_install() {
	local cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $*"
	command -v apt-get >/dev/null ||
		die "$* missing and apt-get not found: install them yourself, or set DATABASE_URL / CLICKHOUSE_ADDR"
	if [[ $EUID -ne 0 ]] && ! { command -v sudo >/dev/null && sudo -n true 2>/dev/null; }; then
		die "$* missing and we are neither root nor allowed passwordless sudo; run:
    sudo sh -c '$cmd'
then run this again."
	fi
	say "installing $* with apt-get (log in .dev/apt.log)"
	if [[ -z $APT_UPDATED ]]; then
		as_root apt-get update -q >>"$APT_LOG" 2>&1 || warn "apt-get update failed (see $APT_LOG); trying the install anyway"
		APT_UPDATED=1
	fi
	if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" </dev/null >>"$APT_LOG" 2>&1; then
		warn "apt-get install $* reported an error (see $APT_LOG); carrying on if the programs are there"
	fi
}

# env_value prints a value the way a POSIX shell reads it back.
env_value() {
	if [[ $1 =~ ^[A-Za-z0-9_./:@?=%+,-]*$ ]]; then
		printf '%s' "$1"
	else
		printf "'%s'" "${1//\'/\'\\\'\'}"
	fi
}

# ---------------------------------------------------------------- PostgreSQL

pg_err=
# pg_ok URL succeeds when psql can run a query there without a password.
pg_ok() {
	pg_err=$(PGCONNECT_TIMEOUT=5 timeout 20 psql -X -w -Atq -d "$1" -c 'select 1' </dev/null 2>&1 >/dev/null) && return 0
	pg_err=${pg_err:-psql timed out}
	return 1
}

# pg_bindir [MAJOR] prints the newest /usr/lib/postgresql/*/bin with initdb,
# or the one for MAJOR.
pg_bindir() {
	local d
	if [[ -n ${1:-} ]]; then
		d=/usr/lib/postgresql/$1/bin
		if [[ -x $d/initdb ]]; then echo "$d"; fi
		return 0
	fi
	for d in /usr/lib/postgresql/*/bin; do
		[[ -x $d/initdb ]] && echo "$d"
	done | sort -V | tail -n 1
}

# as_pg runs a command as the user that owns the private cluster: the postgres
# system user when we are root (initdb refuses root), else ourselves.
as_pg() {
	if [[ $EUID -ne 0 ]]; then
		"$@"
	else
		runuser -u postgres -- "$@"
	fi
}

# pick_pg_base sets PG_BASE to where the private cluster lives: .dev/pg, or,
# when the postgres user cannot reach the repository, a directory under
# /var/tmp (PG_NOTE then says so).
pick_pg_base() {
	PG_BASE=$DEV/pg
	if [[ $EUID -ne 0 ]]; then
		mkdir -p "$PG_BASE"
		[[ -w $PG_BASE && -x $PG_BASE ]] ||
			die "$PG_BASE belongs to another user (made by a run as root?); run scripts/stop-services.sh as that user and remove it"
		return
	fi
	getent passwd postgres >/dev/null || die "no 'postgres' system user: reinstall Debian's postgresql package"
	mkdir -p "$PG_BASE"
	chown postgres: "$PG_BASE"
	chmod 700 "$PG_BASE"
	if as_pg test -w "$PG_BASE"; then
		rm -f "$DEV/pg-location"
		return
	fi
	PG_BASE=/var/tmp/fairway-$(printf '%s' "$ROOT" | cksum | cut -d' ' -f1)/pg
	mkdir -p "$PG_BASE"
	chown postgres: "$PG_BASE" "${PG_BASE%/pg}"
	chmod 700 "$PG_BASE"
	printf '%s\n' "$PG_BASE" >"$DEV/pg-location"
	PG_NOTE=" (data in $PG_BASE: user postgres cannot reach $DEV)"
}

PG_BASE='' PG_NOTE='' PG_HOW=''
setup_postgres() {
	if [[ -n ${DATABASE_URL:-} ]]; then
		command -v psql >/dev/null || apt_install postgresql-client
		command -v psql >/dev/null || die "psql not found; it is needed to check DATABASE_URL"
		pg_ok "$DATABASE_URL" ||
			die "DATABASE_URL=$(redact "$DATABASE_URL") does not answer: ${pg_err}
Fix DATABASE_URL or unset it to use (or start) a local server."
		PG_URL=$DATABASE_URL
		info "postgres: using DATABASE_URL $(redact "$PG_URL")"
		return
	fi

	# Look at the default port before installing anything, so that a system
	# service the package's postinst may start is never picked up by mistake.
	local default_listening='' why=''
	port_open 127.0.0.1 5432 && default_listening=1
	command -v psql >/dev/null || apt_install postgresql
	command -v psql >/dev/null || die "psql still missing after installing postgresql (see $APT_LOG)"
	if [[ -z $FORCE_PRIVATE && -n $default_listening ]]; then
		if pg_ok "$PG_DEFAULT_URL"; then
			PG_URL=$PG_DEFAULT_URL
			info "postgres: using 127.0.0.1:5432"
			return
		fi
		why=" (127.0.0.1:5432 refused us: ${pg_err%%$'\n'*})"
	fi
	start_private_postgres
	if [[ $PG_HOW == started* || -n $why ]]; then say "postgres: $PG_HOW on 127.0.0.1:${PG_PORT}${PG_NOTE}${why}"; else info "postgres: $PG_HOW on 127.0.0.1:${PG_PORT}${PG_NOTE}${why}"; fi
}

start_private_postgres() {
	local base data bin ver pid port sock url i
	[[ -n $(pg_bindir) ]] || apt_install postgresql
	[[ -n $(pg_bindir) ]] || die "no /usr/lib/postgresql/*/bin/initdb after installing postgresql (see $APT_LOG)"
	pick_pg_base
	base=$PG_BASE
	data=$base/data
	port=$(cat "$base/port" 2>/dev/null || true)

	if [[ -f $data/PG_VERSION ]]; then
		ver=$(cat "$data/PG_VERSION")
		bin=$(pg_bindir "$ver")
		[[ -n $bin ]] || die "$data was made by PostgreSQL $ver, which is not installed; run scripts/stop-services.sh and remove $base"
	else
		bin=$(pg_bindir)
		rm -rf "$data"
		as_pg mkdir -p "$data"
		if ! as_pg "$bin/initdb" -D "$data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >"$base/initdb.log" 2>&1; then
			tail -n 20 "$base/initdb.log" >&2
			die "initdb failed (log: $base/initdb.log)"
		fi
		printf "\ninclude_if_exists = 'fairway.conf'\n" | as_pg tee -a "$data/postgresql.conf" >/dev/null
	fi

	# Running already? Reuse it when it answers; give a starting server time.
	if pid=$(pid_is "$data/postmaster.pid" postgres "$data"); then
		url="postgres://postgres@127.0.0.1:${port}/postgres?sslmode=disable"
		for ((i = 0; i < WAIT_SECONDS; i++)); do
			if [[ -n $port ]] && pg_ok "$url"; then
				PG_PORT=$port PG_URL=$url PG_HOW="private server"
				return
			fi
			sleep 1
		done
		warn "private postgres (pid $pid) does not answer on port ${port:-?}; restarting it"
		as_pg "$bin/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || kill -9 "$pid" 2>/dev/null || true
	fi
	# The server is gone: its postmaster.pid and socket lock are stale. (The
	# postmaster would honour them while its pid is an unreaped zombie.)
	rm -f "$data/postmaster.pid" "$base"/run/.s.PGSQL.*

	if [[ -z $port ]] || port_open 127.0.0.1 "$port"; then
		port=$(free_port "$PG_PORT_FIRST") || die "no free port for PostgreSQL"
	fi
	sock=$base/run
	as_pg mkdir -p "$sock"
	# Unix socket paths are limited to 107 bytes; go TCP-only when too long.
	((${#sock} + 20 > 107)) && sock=
	{
		echo "# written by scripts/dev-services.sh at each start"
		echo "port = $port"
		echo "listen_addresses = '127.0.0.1'"
		echo "unix_socket_directories = '${sock//\'/\'\'}'"
		echo "max_connections = 200"
		echo "fsync = off"
		echo "logging_collector = off"
	} | as_pg tee "$data/fairway.conf" >/dev/null
	printf '%s\n' "$port" >"$base/port.tmp" && mv -f "$base/port.tmp" "$base/port"

	# 9>&-: the server must not inherit (and hold) services.lock.
	if ! as_pg "$bin/pg_ctl" -D "$data" -l "$base/postgres.log" -w -t "$WAIT_SECONDS" start >/dev/null 2>&1 9>&-; then
		tail -n 20 "$base/postgres.log" >&2 || true
		die "private postgres did not start on 127.0.0.1:$port (log: $base/postgres.log)"
	fi
	url="postgres://postgres@127.0.0.1:${port}/postgres?sslmode=disable"
	pg_ok "$url" || die "private postgres started but does not answer on 127.0.0.1:$port: $pg_err"
	PG_PORT=$port PG_URL=$url PG_HOW="started private server"
}

# ---------------------------------------------------------------- ClickHouse

CH_DIR=$DEV/clickhouse
CH_PID=$CH_DIR/clickhouse-server.pid
CH_HOW=''

ch_err=
# ch_ok HOST PORT succeeds when clickhouse-client can run a query there.
ch_ok() {
	ch_err=$(timeout 10 clickhouse-client --host "$1" --port "$2" --connect_timeout=5 -q 'SELECT 1' </dev/null 2>&1 >/dev/null) && return 0
	ch_err=${ch_err:-clickhouse-client timed out}
	ch_err=$(tr -s '\n' ' ' <<<"$ch_err")
	ch_err=${ch_err% }
	return 1
}

# http_ok URL succeeds when a ClickHouse HTTP interface answers /ping there.
http_ok() {
	local hp=${1#*://}
	hp=${hp%%/*}
	# shellcheck disable=SC2016 # expanded by the inner bash
	timeout 5 bash -c 'exec 3<>"/dev/tcp/$0/$1" && printf "GET /ping HTTP/1.0\r\n\r\n" >&3 && grep -q "^Ok\." <&3' \
		"${hp%:*}" "${hp##*:}" 2>/dev/null
}

setup_clickhouse() {
	local host port
	if [[ -n ${CLICKHOUSE_ADDR:-} ]]; then
		command -v clickhouse-client >/dev/null || apt_install clickhouse-client
		command -v clickhouse-client >/dev/null || die "clickhouse-client not found; it is needed to check CLICKHOUSE_ADDR"
		host=${CLICKHOUSE_ADDR%:*} port=${CLICKHOUSE_ADDR##*:}
		[[ $CLICKHOUSE_ADDR == *:* && $port =~ ^[0-9]+$ ]] || die "CLICKHOUSE_ADDR=$CLICKHOUSE_ADDR: want host:port (the native protocol port, usually 9000)"
		host=${host#[}
		host=${host%]}
		ch_ok "$host" "$port" ||
			die "CLICKHOUSE_ADDR=$CLICKHOUSE_ADDR does not answer: ${ch_err}
Fix CLICKHOUSE_ADDR (the native port, not HTTP 8123) or unset it to use (or start) a local server."
		CH_ADDR=$CLICKHOUSE_ADDR
		if [[ -n ${CLICKHOUSE_HTTP:-} ]]; then
			http_ok "$CLICKHOUSE_HTTP" || die "CLICKHOUSE_HTTP=$CLICKHOUSE_HTTP does not answer /ping; fix or unset it"
			CH_HTTP=$CLICKHOUSE_HTTP
		else
			local ptcp='' phttp=''
			[[ -r $CH_DIR/ports ]] && read -r ptcp phttp _ <"$CH_DIR/ports"
			if [[ $port == "$ptcp" && ($host == 127.0.0.1 || $host == localhost) ]]; then
				CH_HTTP=http://$host:$phttp # our private server
			elif [[ $host == *:* ]]; then
				CH_HTTP=http://[$host]:8123
			else
				CH_HTTP=http://$host:8123
			fi
			http_ok "$CH_HTTP" || warn "guessed CLICKHOUSE_HTTP=$CH_HTTP does not answer; set CLICKHOUSE_HTTP if you need the HTTP interface"
		fi
		info "clickhouse: using CLICKHOUSE_ADDR $CH_ADDR"
		return
	fi

	local default_listening='' why=''
	port_open 127.0.0.1 9000 && default_listening=1
	command -v clickhouse-client >/dev/null || apt_install clickhouse-server clickhouse-client
	command -v clickhouse-client >/dev/null || die "clickhouse-client still missing after apt-get (see $APT_LOG)"
	if [[ -z $FORCE_PRIVATE && -n $default_listening ]]; then
		if ch_ok 127.0.0.1 9000; then
			CH_ADDR=127.0.0.1:9000 CH_HTTP=http://127.0.0.1:8123
			http_ok "$CH_HTTP" || warn "ClickHouse on 127.0.0.1:9000 has no HTTP interface on 8123; CLICKHOUSE_HTTP will not answer"
			info "clickhouse: using 127.0.0.1:9000"
			return
		fi
		why=" (127.0.0.1:9000 is not a ClickHouse we can use: ${ch_err:0:120})"
	fi
	start_private_clickhouse
	if [[ $CH_HOW == started* || -n $why ]]; then say "clickhouse: $CH_HOW on ${CH_ADDR}${why}"; else info "clickhouse: $CH_HOW on ${CH_ADDR}${why}"; fi
}

start_private_clickhouse() {
	local server pid tcp='' http='' inter='' i f
	server=$(command -v clickhouse-server || true)
	[[ -z $server && -x /usr/sbin/clickhouse-server ]] && server=/usr/sbin/clickhouse-server
	if [[ -z $server ]]; then
		apt_install clickhouse-server clickhouse-client
		server=$(command -v clickhouse-server || echo /usr/sbin/clickhouse-server)
		[[ -x $server ]] || die "clickhouse-server still missing after apt-get (see $APT_LOG)"
	fi
	mkdir -p "$CH_DIR"
	[[ -r $CH_DIR/ports ]] && read -r tcp http inter <"$CH_DIR/ports"

	# Running already? Reuse it when it answers; give a starting server time.
	if pid=$(pid_is "$CH_PID" clickhouse "$CH_DIR/config.xml") && [[ -n $tcp ]]; then
		for ((i = 0; i < WAIT_SECONDS; i++)); do
			if ch_ok 127.0.0.1 "$tcp"; then
				CH_ADDR=127.0.0.1:$tcp CH_HTTP=http://127.0.0.1:$http CH_HOW="private server"
				return
			fi
			sleep 1
		done
		warn "private clickhouse (pid $pid) does not answer on port $tcp; restarting it"
		kill "$pid" 2>/dev/null || true
		for ((i = 0; i < 30; i++)); do [[ -d /proc/$pid ]] || break; sleep 1; done
		kill -9 "$pid" 2>/dev/null || true
	fi
	# 18.16 refuses to start while its pid file exists, even a stale one.
	rm -f "$CH_PID"

	local attempt tcp_first=$CH_TCP_FIRST http_first=$CH_HTTP_FIRST inter_first=$CH_INTERSERVER_FIRST
	for attempt in 1 2 3; do
		if [[ -z $tcp ]] || port_open 127.0.0.1 "$tcp"; then
			tcp=$(free_port "$tcp_first") || die "no free port for ClickHouse"
		fi
		if [[ -z $http || $http == "$tcp" ]] || port_open 127.0.0.1 "$http"; then
			http=$(free_port "$http_first" "$tcp") || die "no free port for ClickHouse HTTP"
		fi
		if [[ -z $inter || $inter == "$tcp" || $inter == "$http" ]] || port_open 127.0.0.1 "$inter"; then
			inter=$(free_port "$inter_first" "$tcp" "$http") || die "no free port for ClickHouse interserver"
		fi
		write_clickhouse_config "$tcp" "$http" "$inter"
		printf '%s %s %s\n' "$tcp" "$http" "$inter" >"$CH_DIR/ports.tmp" && mv -f "$CH_DIR/ports.tmp" "$CH_DIR/ports"
		: >"$CH_DIR/log/clickhouse-server.err.log"

		# --daemon forks, calls setsid and writes the pid file, so the server
		# outlives the make that started it. It runs as the calling user (18.16
		# does not refuse root), with stdout/stderr going to log/. 9>&-: it must
		# not inherit (and hold) services.lock.
		(cd "$CH_DIR" && "$server" --config-file="$CH_DIR/config.xml" --daemon --pid-file="$CH_PID" </dev/null >>"$CH_DIR/log/start.log" 2>&1 9>&-) || true
		for ((i = 0; i < WAIT_SECONDS; i++)); do
			if ch_ok 127.0.0.1 "$tcp"; then
				CH_ADDR=127.0.0.1:$tcp CH_HTTP=http://127.0.0.1:$http CH_HOW="started private server"
				return
			fi
			if ((i > 3)) && ! pid_is "$CH_PID" clickhouse "$CH_DIR/config.xml" >/dev/null; then
				break
			fi
			sleep 1
		done
		# A port taken between our check and the server's bind: try other
		# ports. Anything else is reported below.
		grep -q 'Address already in use' "$CH_DIR/log/clickhouse-server.err.log" 2>/dev/null || break
		((attempt < 3)) || break
		warn "private clickhouse: a port was taken while it started; trying other ports (attempt $((attempt + 1)) of 3)"
		rm -f "$CH_PID"
		tcp_first=$((tcp + 1)) http_first=$((http + 1)) inter_first=$((inter + 1))
		tcp='' http='' inter=''
	done
	for f in start.log stderr.log clickhouse-server.err.log; do
		[[ -s $CH_DIR/log/$f ]] && {
			echo "--- .dev/clickhouse/log/$f" >&2
			tail -n 15 "$CH_DIR/log/$f" >&2
		}
	done
	die "private clickhouse did not answer on 127.0.0.1:$tcp (logs in $CH_DIR/log)"
}

# xml_path escapes a path for an XML text node.
xml_path() {
	local s=${1//&/&amp;}
	s=${s//</&lt;}
	printf '%s' "${s//>/&gt;}"
}

write_clickhouse_config() {
	local d
	d=$(xml_path "$CH_DIR")
	mkdir -p "$CH_DIR/data" "$CH_DIR/tmp" "$CH_DIR/user_files" "$CH_DIR/format_schemas" "$CH_DIR/log"
	cat >"$CH_DIR/config.xml.tmp" <<EOF
<?xml version="1.0"?>
<!-- Written by scripts/dev-services.sh at each start; edits are lost. -->
<yandex>
    <logger>
        <level>warning</level>
        <log>$d/log/clickhouse-server.log</log>
        <errorlog>$d/log/clickhouse-server.err.log</errorlog>
        <size>50M</size>
        <count>2</count>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <tcp_port>$1</tcp_port>
    <http_port>$2</http_port>
    <interserver_http_port>$3</interserver_http_port>
    <interserver_http_host>127.0.0.1</interserver_http_host>
    <max_connections>1024</max_connections>
    <keep_alive_timeout>3</keep_alive_timeout>
    <max_concurrent_queries>100</max_concurrent_queries>
    <uncompressed_cache_size>268435456</uncompressed_cache_size>
    <mark_cache_size>268435456</mark_cache_size>
    <path>$d/data/</path>
    <tmp_path>$d/tmp/</tmp_path>
    <user_files_path>$d/user_files/</user_files_path>
    <format_schema_path>$d/format_schemas/</format_schema_path>
    <users_config>users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <mlock_executable>false</mlock_executable>
    <max_session_timeout>3600</max_session_timeout>
    <default_session_timeout>60</default_session_timeout>
</yandex>
EOF
	cat >"$CH_DIR/users.xml.tmp" <<'EOF'
<?xml version="1.0"?>
<!-- Written by scripts/dev-services.sh at each start; edits are lost. -->
<yandex>
    <profiles>
        <default>
            <max_memory_usage>2000000000</max_memory_usage>
            <background_pool_size>4</background_pool_size>
            <background_schedule_pool_size>4</background_schedule_pool_size>
            <use_uncompressed_cache>0</use_uncompressed_cache>
        </default>
    </profiles>
    <users>
        <default>
            <password></password>
            <networks>
                <ip>127.0.0.1</ip>
                <ip>::1</ip>
            </networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
    </users>
    <quotas>
        <default>
            <interval>
                <duration>3600</duration>
                <queries>0</queries>
                <errors>0</errors>
                <result_rows>0</result_rows>
                <read_rows>0</read_rows>
                <execution_time>0</execution_time>
            </interval>
        </default>
    </quotas>
</yandex>
EOF
	mv -f "$CH_DIR/config.xml.tmp" "$CH_DIR/config.xml"
	mv -f "$CH_DIR/users.xml.tmp" "$CH_DIR/users.xml"
}

# ---------------------------------------------------------------- old nats-server

# setup_old_nats installs Debian's nats-server package when its binary is
# missing (see the header). Nothing is started.
setup_old_nats() {
	[[ -x /usr/sbin/nats-server ]] && return 0
	apt_install nats-server
	[[ -x /usr/sbin/nats-server ]] || die "/usr/sbin/nats-server still missing after apt-get (see $APT_LOG)"
}

# ---------------------------------------------------------------- main

main() {
	mkdir -p "$DEV"
	# Concurrent makes take turns; the loser then finds the servers running.
	if command -v flock >/dev/null; then
		exec 9>"$DEV/services.lock"
		flock -w 300 9 || die "another scripts/dev-services.sh has held $DEV/services.lock for 5 minutes"
	fi

	PG_URL='' PG_PORT='' CH_ADDR='' CH_HTTP=''
	setup_postgres
	setup_clickhouse
	setup_old_nats

	local tmp
	tmp=$(mktemp "$DEV/.services.env.XXXXXX")
	{
		printf 'DATABASE_URL=%s\n' "$(env_value "$PG_URL")"
		printf 'CLICKHOUSE_ADDR=%s\n' "$(env_value "$CH_ADDR")"
		printf 'CLICKHOUSE_HTTP=%s\n' "$(env_value "$CH_HTTP")"
	} >"$tmp"
	chmod 644 "$tmp"
	mv -f "$tmp" "$ENV_FILE"
}

main "$@"
