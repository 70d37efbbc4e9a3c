#!/usr/bin/env bash
# The systemd units in packaging/systemd/ pass `systemd-analyze verify` (with ExecStart pointing at
# the binary just built). Skipped (77) where systemd-analyze is not installed.
set -euo pipefail
warden=$1 units=$2
command -v systemd-analyze >/dev/null || { echo "no systemd-analyze: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$units/warden.socket" "$units/warden.service" "$work/"
sed -i "s|/usr/local/bin/warden |$warden |" "$work/warden.service"
grep -q "ExecStart=$warden serve" "$work/warden.service"
out=$(cd "$work" && systemd-analyze verify --man=no ./warden.socket ./warden.service 2>&1)
[[ -z $out ]] || { echo "$out"; exit 1; }
echo "warden.socket, warden.service: verified"
