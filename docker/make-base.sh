#!/usr/bin/env bash
# The base image from Debian's packages, since no image registry is reachable: debootstrap
# (minbase variant) of Debian 12 into a folder, trimmed like debian:bookworm-slim (no docs, man
# pages or locales), then `docker import` as xtwin/debian:bookworm when a Docker engine answers,
# else a tarball to import elsewhere. Needs root and Debian's mirror.
#   docker/make-base.sh [DIR]       (default build-docker/base; reused when it is there)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-docker/base}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
[ "$(id -u)" -eq 0 ] || { echo "make-base: run as root (debootstrap)" >&2; exit 1; }
command -v debootstrap >/dev/null || apt-get install -y -q --no-install-recommends debootstrap
if [ ! -f "$dir/etc/debian_version" ]; then
  rm -rf "$dir"
  mkdir -p "$dir"
  debootstrap --variant=minbase --include=ca-certificates bookworm "$dir" "$mirror"
  # As debian:bookworm-slim: dpkg leaves docs, man pages and translations out from now on.
  cat >"$dir/etc/dpkg/dpkg.cfg.d/docker-slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
CFG
  printf 'APT::Install-Recommends "false";\n' >"$dir/etc/apt/apt.conf.d/docker-no-recommends"
  find "$dir/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
  rm -rf "$dir"/usr/share/man/* "$dir"/usr/share/info/* "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
fi
echo "make-base: $(du -sh "$dir" | cut -f1) in $dir"
if docker info >/dev/null 2>&1; then
  tar -C "$dir" -c . | docker import - xtwin/debian:bookworm
  echo "make-base: imported as xtwin/debian:bookworm"
else
  tar -C "$dir" -czf "$dir.tar.gz" .
  echo "make-base: no Docker engine answers here; import elsewhere with:"
  echo "  docker import $dir.tar.gz xtwin/debian:bookworm"
fi
