#!/usr/bin/env bash
# Installs the Debian 12 packages the build, the tests and the figures need, when missing.
# Idempotent: a machine that already has them does nothing.
set -euo pipefail

packages=(
  cmake make g++ pkg-config
  libboost1.81-dev libboost-json1.81-dev
  libsimdjson-dev libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev libxxhash-dev
  libssl-dev ca-certificates libsystemd-dev zlib1g-dev libzstd-dev
  libgtest-dev libgmock-dev libbenchmark-dev libgoogle-perftools-dev
  gnuplot-nox
)
if [[ "${WARDEN_WITH_NODE:-0}" == 1 ]]; then
  command -v node >/dev/null 2>&1 || packages+=(nodejs)
  command -v npm >/dev/null 2>&1 || packages+=(npm)
fi
if [[ "${WARDEN_WITH_BENCH:-0}" == 1 ]]; then
  packages+=(wrk nginx-light python3 curl)  # the bench scripts drive and read wrk with these
fi
if [[ "${WARDEN_WITH_BROWSER:-0}" == 1 ]]; then
  packages+=(chromium)
fi
# systemd-analyze, to verify the shipped units (packaging/systemd/).
if [[ "${WARDEN_WITH_PACKAGING:-0}" == 1 ]]; then
  packages+=(dpkg-dev)  # dpkg-shlibdeps, for the package's Depends
fi
if [[ "${WARDEN_WITH_SYSTEMD_TOOLS:-0}" == 1 ]]; then
  command -v systemd-analyze >/dev/null 2>&1 || packages+=(systemd)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "installing Debian packages: ${missing[*]}"
sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
