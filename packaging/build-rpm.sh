#!/bin/sh
# Build the noarch RPM from the tracked files of this tree; print its path.
# usage: packaging/build-rpm.sh OUTDIR
set -eu
out=$(realpath "${1:?usage: build-rpm.sh OUTDIR}")
top=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n 's/^Version: *//p' "$top/packaging/rpm/xce-agent.spec")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/SOURCES" "$work/src/xce-agent-$version" "$out"
(cd "$top" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -c) |
    tar -x -C "$work/src/xce-agent-$version"
tar -C "$work/src" -czf "$work/SOURCES/xce-agent-$version.tar.gz" "xce-agent-$version"
env PATH=/usr/sbin:/usr/bin:/sbin:/bin rpmbuild -bb --nodeps \
    --define "_topdir $work" "$top/packaging/rpm/xce-agent.spec" >"$work/build.log" 2>&1 ||
    { tail -40 "$work/build.log" >&2; exit 1; }
cp "$work"/RPMS/noarch/*.rpm "$out"/
ls "$out"/xce-agent-*.noarch.rpm
