#!/bin/sh
# Build the noarch RPMs (xce-agent, xce-controller, xce-provisioner, python3-xce-protocol)
# from the tracked files of this tree; print their paths, one a line.
# usage: packaging/build-rpm.sh OUTDIR
#
# On Debian's rpm this targets the Python of RHEL 9 and Amazon Linux 2023 (3.9): the modules go
# to python3.9's site-packages, so rpm's dependency generator says python(abi) = 3.9, and the
# scripts run /usr/bin/python3. XCE_RPM_PYTHON_VERSION picks another target. A release RPM is
# built in the target's own buildroot instead, with its macros (see README.md).
set -eu
out=$(realpath "${1:?usage: build-rpm.sh OUTDIR}")
top=$(cd "$(dirname "$0")/.." && pwd)
target=${XCE_RPM_PYTHON_VERSION:-3.9}
version=$(sed -n 's/^Version: *//p' "$top/packaging/rpm/xce-agent.spec")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/SOURCES" "$work/src/xce-agent-$version" "$out"
(cd "$top" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -c) |
    tar -x -C "$work/src/xce-agent-$version"
tar -C "$work/src" -czf "$work/SOURCES/xce-agent-$version.tar.gz" "xce-agent-$version"
env PATH=/usr/sbin:/usr/bin:/sbin:/bin rpmbuild -bb --nodeps \
    --define "_topdir $work" \
    --define "python3_sitelib /usr/lib/python$target/site-packages" \
    --define "python3_version $target" \
    --define "python3_version_nodots $(echo "$target" | tr -d .)" \
    "$top/packaging/rpm/xce-agent.spec" >"$work/build.log" 2>&1 ||
    { tail -40 "$work/build.log" >&2; exit 1; }
cp "$work"/RPMS/noarch/*.rpm "$out"/
ls "$out"/xce-agent-[0-9]*.noarch.rpm "$out"/xce-controller-[0-9]*.noarch.rpm \
    "$out"/xce-provisioner-[0-9]*.noarch.rpm "$out"/python3-xce-protocol-[0-9]*.noarch.rpm
