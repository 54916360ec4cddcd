#!/bin/sh
# Makes sure redis-server (and what the TLS features build and test with) is installed.
# Installs with apt-get when missing (via sudo when not root); otherwise says what to install.
set -e
need=""
command -v redis-server >/dev/null 2>&1 || need="$need redis-server"
command -v pkg-config >/dev/null 2>&1 || need="$need pkg-config"
command -v openssl >/dev/null 2>&1 || need="$need openssl"
if ! pkg-config --exists openssl 2>/dev/null; then need="$need libssl-dev"; fi
[ -z "$need" ] && exit 0
echo "ensure-redis: installing:$need" >&2
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-redis: no apt-get here; install$need with your package manager" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
        echo "ensure-redis: not root and no sudo; install$need as root" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq $need >/dev/null
command -v redis-server >/dev/null 2>&1
