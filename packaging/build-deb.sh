#!/bin/sh
# Build the .debs (python3-xce-protocol, xce-agent, xce-controller, xce-provisioner) from the tracked files of
# this tree in a scratch copy; print their paths, one a line.
# usage: packaging/build-deb.sh OUTDIR
set -eu
out=$(realpath "${1:?usage: build-deb.sh OUTDIR}")
top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/xce-agent" "$out"
(cd "$top" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -c) |
    tar -x -C "$work/xce-agent"
cp -r "$top/packaging/debian" "$work/xce-agent/debian"
# A plain PATH: a Python earlier on PATH (pyenv, a venv) would build the packages.
(cd "$work/xce-agent" && env PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    dpkg-buildpackage -us -uc -b >"$work/build.log" 2>&1) || { tail -40 "$work/build.log" >&2; exit 1; }
cp "$work"/*.deb "$work"/*.changes "$work"/*.buildinfo "$out"/
ls "$out"/python3-xce-protocol_*_all.deb "$out"/xce-agent_*_all.deb "$out"/xce-controller_*_all.deb \
    "$out"/xce-provisioner_*_all.deb
