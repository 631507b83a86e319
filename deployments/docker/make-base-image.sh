#!/usr/bin/env bash
# The rootfs of the local base image Dockerfile.cpu builds FROM: Debian bookworm (debootstrap from the
# Debian mirror; no registry is reachable) with python3, as a tarball. specwatch imports it into the
# container engine as localhost/specwatch-base:bookworm (`specwatch.engine.docker.import_rootfs`).
# Usage: make-base-image.sh OUT.tar   (root; needs debootstrap)
set -euo pipefail
out=$1
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" > "$work/debootstrap.log" 2>&1 \
  || { tail -5 "$work/debootstrap.log" >&2; exit 1; }
chroot "$work/rootfs" /bin/sh -c 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
  --no-install-recommends python3 python3-venv python3-pip ca-certificates && apt-get clean \
  && rm -rf /var/lib/apt/lists/*' > "$work/chroot.log" 2>&1 || { tail -5 "$work/chroot.log" >&2; exit 1; }
tar -C "$work/rootfs" -cf "$out" .
