#!/usr/bin/env bash
# nats.sh runs a development NATS server the way docs/operating.md runs
# fairway: nats-server of the version go.mod pins, deploy/nats/single.conf
# with its users and permissions, JetStream data in .dev/nats/ (or
# FAIRWAY_NATS_DIR).
#
#   scripts/nats.sh install   install bin/nats-server (go install; skipped
#                             when bin/nats-server is already that version)
#   scripts/nats.sh start     install, then start it in the background and
#                             print the NATS_URL of each command (`make nats`)
#   scripts/nats.sh stop      stop the server `start` started (`make nats-stop`)
#
# Ports: 14222 for clients and 18222 for monitoring (FAIRWAY_NATS_PORT,
# FAIRWAY_NATS_HTTP_PORT), not nats-server's defaults, so that a system
# nats-server on 4222 keeps running; a port taken by another process stops
# `start` with a message naming it.
#
# Files in .dev/nats/: passwords.env (each user's password, generated once),
# urls.env (NATS_URL_INGEST, NATS_URL_DISPATCHER, NATS_URL_SINKS,
# NATS_URL_OPERATOR), single/ (the JetStream store), nats-server.log and
# nats-server.pid. FAIRWAY_NATS_DIR names another directory for them (a
# relative path is taken from the current one): a second server, such as
# the one the tests of internal/operating start, then leaves the first
# one's files alone; start and stop act on the server of that directory.
# The server runs in that directory, so single.conf's store_dir
# (./.dev/nats/single, relative to the working directory) puts the store
# in its .dev/nats/single/.
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)
DIR=${FAIRWAY_NATS_DIR:-$ROOT/.dev/nats}
[[ $DIR == /* ]] || DIR=$PWD/$DIR
# WORK is the server's working directory: single.conf's store_dir
# (./.dev/nats/single) is relative to it.
WORK=$ROOT
[[ -n ${FAIRWAY_NATS_DIR:-} ]] && WORK=$DIR
STORE=$WORK/.dev/nats/single
SHOW=${DIR#"$ROOT"/}     # .dev/nats in messages unless FAIRWAY_NATS_DIR is elsewhere
SHOWSTORE=${STORE#"$ROOT"/}
BIN=$ROOT/bin/nats-server
CONF=$ROOT/deploy/nats/single.conf
PIDFILE=$DIR/nats-server.pid
LOG=$DIR/nats-server.log
PASSWORDS=$DIR/passwords.env
URLS=$DIR/urls.env
PORT=${FAIRWAY_NATS_PORT:-14222}
HTTP_PORT=${FAIRWAY_NATS_HTTP_PORT:-18222}
MODULE=github.com/nats-io/nats-server/v2
# The users of deploy/nats/accounts.conf, by the variable holding each
# one's password.
USERS=(SYS:sys INGEST:ingest DISPATCHER:dispatcher SINKS:sinks OPERATOR:operator PUBLISHER_ACME:publisher-acme)

say() { printf '%s\n' "$*"; }
die() {
	printf 'nats: %s\n' "$*" >&2
	exit 1
}

# port_open PORT succeeds when something on 127.0.0.1 accepts TCP
# connections on PORT.
port_open() {
	# shellcheck disable=SC2016 # expanded by the inner bash
	timeout 2 bash -c ': >"/dev/tcp/127.0.0.1/$0"' "$1" 2>/dev/null
}

# running prints the pid of the server `start` started when it is alive.
running() {
	local pid stat
	[[ -r $PIDFILE ]] || return 1
	pid=$(tr -dc 0-9 <"$PIDFILE")
	[[ -n $pid ]] || return 1
	stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
	[[ $stat == "$pid (nats-server)"* && ${stat##*) } != Z* ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$CONF" || return 1
	[[ $(readlink "/proc/$pid/cwd") == "$(cd "$WORK" 2>/dev/null && pwd -P)" ]] || return 1
	echo "$pid"
}

# pinned prints the nats-server version go.mod requires (v2.15.2).
pinned() {
	command -v go >/dev/null || die "the go command is needed to install nats-server (https://go.dev/dl/)"
	(cd "$ROOT" && go list -m -f '{{.Version}}' "$MODULE") || die "cannot read the version of $MODULE from go.mod"
}

install() {
	local want have
	want=$(pinned)
	have=$("$BIN" --version 2>/dev/null | sed -n 's/^nats-server: //p') || true
	[[ $have == "$want" ]] && return 0
	say "installing nats-server $want into bin/ (go install $MODULE@$want)"
	(cd "$ROOT" && GOBIN=$ROOT/bin go install "$MODULE@$want") || die "go install $MODULE@$want failed"
	have=$("$BIN" --version 2>/dev/null | sed -n 's/^nats-server: //p') || true
	[[ $have == "$want" ]] || die "bin/nats-server reports version '$have' after installing $want"
}

# passwords loads .dev/nats/passwords.env, writing it first when missing:
# letters and digits starting with a letter, as accounts.conf requires.
passwords() {
	local u v
	mkdir -p "$DIR"
	if [[ ! -s $PASSWORDS ]]; then
		(
			umask 077
			for u in "${USERS[@]}"; do
				printf 'FAIRWAY_%s_PASSWORD=p%s\n' "${u%%:*}" "$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
			done >"$PASSWORDS"
		)
	fi
	set -a
	# shellcheck disable=SC1090
	. "$PASSWORDS"
	set +a
	for u in "${USERS[@]}"; do
		v=FAIRWAY_${u%%:*}_PASSWORD
		[[ -n ${!v:-} ]] || die "$PASSWORDS lacks $v; remove the file to generate new passwords"
	done
}

# urls writes .dev/nats/urls.env and prints the NATS_URL of each command.
urls() {
	u() { local v=FAIRWAY_${1}_PASSWORD; printf 'nats://%s:%s@127.0.0.1:%s' "$2" "${!v}" "$PORT"; }
	{
		say "NATS_URL_INGEST=$(u INGEST ingest)"
		say "NATS_URL_DISPATCHER=$(u DISPATCHER dispatcher)"
		say "NATS_URL_SINKS=$(u SINKS sinks)"
		say "NATS_URL_OPERATOR=$(u OPERATOR operator)"
	} >"$URLS"
	say "NATS_URL of each command (also in $SHOW/urls.env):"
	say "  bin/ingest       NATS_URL=$(u INGEST ingest)"
	say "  bin/dispatcher   NATS_URL=$(u DISPATCHER dispatcher)"
	say "  bin/sinks        NATS_URL=$(u SINKS sinks)"
	say "  bin/fairway      NATS_URL=$(u OPERATOR operator)"
	say "Stop it with: make nats-stop"
}

start() {
	local pid i
	install
	passwords
	if pid=$(running); then
		say "nats-server already running (pid $pid) on 127.0.0.1:$PORT; log $SHOW/nats-server.log"
		urls
		return 0
	fi
	for p in "$PORT" "$HTTP_PORT"; do
		if port_open "$p"; then
			die "port $p on 127.0.0.1 is taken by another process (see: ss -ltnp 'sport = :$p'); stop it, or choose other ports with FAIRWAY_NATS_PORT and FAIRWAY_NATS_HTTP_PORT"
		fi
	done
	# In WORK, single.conf's store_dir is STORE. GOGC=400 as
	# deploy/nats/README.md recommends ("Garbage collection").
	cd "$WORK"
	GOGC=400 nohup "$BIN" -c "$CONF" -p "$PORT" -m "$HTTP_PORT" >"$LOG" 2>&1 </dev/null &
	pid=$!
	echo "$pid" >"$PIDFILE"
	for ((i = 0; i < 100; i++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 20 "$LOG" >&2
			rm -f "$PIDFILE"
			die "nats-server exited at start; its log is above ($SHOW/nats-server.log)"
		fi
		port_open "$PORT" && break
		sleep 0.1
	done
	port_open "$PORT" || die "nats-server (pid $pid) does not accept connections on 127.0.0.1:$PORT after 10s; see $SHOW/nats-server.log"
	say "nats-server $("$BIN" --version | sed -n 's/^nats-server: //p') running (pid $pid) on 127.0.0.1:$PORT, monitoring http://127.0.0.1:$HTTP_PORT, JetStream data in $SHOWSTORE, log $SHOW/nats-server.log"
	urls
}

stop() {
	local pid i
	if ! pid=$(running); then
		rm -f "$PIDFILE"
		say "nats-server of make nats is not running"
		return 0
	fi
	kill -TERM "$pid"
	for ((i = 0; i < 100; i++)); do
		[[ -d /proc/$pid && $(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null) != Z ]] || break
		sleep 0.1
	done
	[[ -d /proc/$pid && $(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null) != Z ]] && die "nats-server (pid $pid) did not stop within 10s"
	rm -f "$PIDFILE"
	say "stopped nats-server (pid $pid); its data stays in $SHOW/"
}

case ${1:-} in
install) install ;;
start) start ;;
stop) stop ;;
*) die "usage: scripts/nats.sh install|start|stop" ;;
esac
