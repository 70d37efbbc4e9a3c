#!/usr/bin/env bash
# `make deb`'s package (cpack -G DEB from the build folder, into a folder of its own): the binary,
# the systemd units with ExecStart at /usr/bin/warden, the example config, and Depends naming the
# runtime libraries. The packaged binary runs and accepts the example config. Skipped (77) where
# dpkg-shlibdeps (dpkg-dev) is not installed, or off Debian 12 on amd64.
set -euo pipefail
build=$1
command -v dpkg-shlibdeps >/dev/null || { echo "no dpkg-shlibdeps: skipped"; exit 77; }
# The library names below are Debian 12's, the architecture amd64.
. /etc/os-release
[[ ${ID:-} == debian && ${VERSION_ID:-} == 12 && $(dpkg --print-architecture) == amd64 ]] ||
  { echo "not Debian 12 on amd64: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$build" && cpack -G DEB -B "$work/out" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; exit 1; }
deb=$(ls "$work"/out/warden_*_amd64.deb)
fail() { echo "FAIL: $*"; exit 1; }

files=$(dpkg-deb -c "$deb" | awk '{print $6}')
for f in ./usr/bin/warden ./usr/lib/systemd/system/warden.service \
         ./usr/lib/systemd/system/warden.socket ./usr/share/doc/warden/examples/warden.yaml \
         ./usr/share/doc/warden/README.md; do
  grep -qx "$f" <<<"$files" || fail "$f not in the package: $files"
done
[[ $(grep -c '^\./work\|^\./tmp\|^\./root' <<<"$files") == 0 ]] || fail "build paths in the package"

depends=$(dpkg-deb -f "$deb" Depends)
for lib in libboost-json1.81.0 libsimdjson14 libyaml-cpp0.7 libspdlog1.10 libxxhash0 libssl3 \
           libsystemd0 libtcmalloc-minimal4; do
  grep -q "$lib" <<<"$depends" || fail "Depends lacks $lib: $depends"
done

dpkg-deb -x "$deb" "$work/root"
grep -qx 'ExecStart=/usr/bin/warden serve --config /etc/warden.yaml --state-file /var/lib/warden/state.json' \
  "$work/root/usr/lib/systemd/system/warden.service" || fail "ExecStart is not /usr/bin/warden"
version=$(dpkg-deb -f "$deb" Version)
[[ $("$work/root/usr/bin/warden" --version) == "warden $version" ]] || fail "--version is not $version"
"$work/root/usr/bin/warden" serve --config "$work/root/usr/share/doc/warden/examples/warden.yaml" \
  --check >"$work/check.log" 2>&1 || { cat "$work/check.log"; fail "the example config is refused"; }
echo "$(basename "$deb"): contents, Depends, ExecStart, --version and the example config checked"
