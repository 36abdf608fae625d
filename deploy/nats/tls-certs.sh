#!/usr/bin/env bash
# Makes a private CA and the certificates single-tls.conf and the fairway
# services need, with openssl (README.md, "TLS"):
#
#   deploy/nats/tls-certs.sh DIR [SERVER_NAME ...]
#
#   DIR/ca.pem, ca-key.pem          the CA; keep ca-key.pem off the servers
#   DIR/server.pem, server-key.pem  nats-server's certificate, valid for each
#                                   SERVER_NAME (host names and IP addresses;
#                                   default localhost 127.0.0.1)
#   DIR/<client>.pem, <client>-key.pem
#                                   a client certificate for each name in
#                                   $CLIENTS (default: ingest dispatcher sinks
#                                   operator publisher-acme)
#
# An existing CA in DIR is kept: running the script again issues fresh server
# and client certificates signed by it (to renew them, or for other names).
# Keys are ECDSA P-256; certificates last $DAYS days (default 365), the CA
# ten years.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
dir=$1
shift
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(localhost 127.0.0.1)
clients=${CLIENTS:-ingest dispatcher sinks operator publisher-acme}
days=${DAYS:-365}
mkdir -p "$dir"
cd "$dir"
umask 077

newkey=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
serial() { echo "0x$(openssl rand -hex 16)"; }
# quiet runs a command and shows its output only when it fails.
quiet() {
  local out
  out=$("$@" 2>&1) || { printf '%s\n' "$out" >&2; return 1; }
}

if [[ ! -f ca.pem ]]; then
  quiet openssl req -x509 "${newkey[@]}" -days 3650 -subj "/CN=fairway NATS CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout ca-key.pem -out ca.pem
fi

# sign NAME EXTENSIONS: a key and a certificate for NAME signed by the CA.
sign() {
  quiet openssl req -new "${newkey[@]}" -subj "/CN=$1" -keyout "$1-key.pem" -out "$1.csr"
  quiet openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca-key.pem -set_serial "$(serial)" -days "$days" \
    -extfile <(printf '%s\n' "$2") -out "$1.pem"
  rm "$1.csr"
}

san=
for n in "${names[@]}"; do
  if [[ $n =~ ^[0-9.]+$ || $n == *:* ]]; then san+=",IP:$n"; else san+=",DNS:$n"; fi
done
sign server "subjectAltName=${san#,}
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth"
for c in $clients; do
  sign "$c" "keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
done
chmod 644 ./*.pem
chmod 600 ./*-key.pem
echo "wrote $(ls | tr '\n' ' ')to $PWD"
