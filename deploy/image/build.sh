#!/usr/bin/env bash
# Builds the rehearse container image with podman: a static release binary
# (the gnu target with crt-static, built here, outside the image), a small
# staged build context, then `podman build` of the repository's
# Containerfile FROM scratch. Idempotent: cargo and podman both reuse what
# is up to date.
#
#   deploy/image/build.sh                  # builds localhost/rehearse:latest
#   IMAGE=registry.example/rehearse:1 deploy/image/build.sh
#   deploy/image/build.sh --context-only   # stage target/image-context/ only
set -euo pipefail
cd "$(dirname "$0")/../.."

IMAGE="${IMAGE:-localhost/rehearse:latest}"
TRIPLE=x86_64-unknown-linux-gnu
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
BINARY="$TARGET_DIR/$TRIPLE/release/rehearse"
CONTEXT="$TARGET_DIR/image-context"
# The user the image runs as: numeric, not root, with no home of its own
# but the working directory (65532 is the "nonroot" of distroless images).
USER_ID=65532

# 1. The binary: statically linked against glibc. --target keeps the flags
#    off build scripts and proc macros (which must stay dynamic). In a
#    static binary the getrandom crate cannot find glibc's getrandom() by
#    dlsym and would read /dev/urandom instead: linux_getrandom calls it
#    directly, so no device file is needed either.
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static --cfg getrandom_backend=\"linux_getrandom\"" \
  cargo build --release --target "$TRIPLE" --bin rehearse
# Static: no program interpreter, no shared library needed.
if readelf --program-headers "$BINARY" | grep -q INTERP ||
  readelf --dynamic "$BINARY" | grep -q NEEDED; then
  echo "build.sh: $BINARY is not statically linked:" >&2
  readelf --program-headers --dynamic "$BINARY" | grep 'INTERP\|NEEDED' >&2
  exit 1
fi

# 2. The build context: only what the image holds (target/ is gigabytes).
rm -rf "$CONTEXT"
mkdir -p "$CONTEXT/rootfs/etc" "$CONTEXT/rootfs/tmp" "$CONTEXT/work"
# Without its debug information (line tables: 112 MB of the release
# profile's 140), keeping the symbols a backtrace names.
strip --strip-debug -o "$CONTEXT/rehearse" "$BINARY"
printf 'root:x:0:0:root:/:/sbin/nologin\nrehearse:x:%s:%s:rehearse:/work:/sbin/nologin\n' \
  "$USER_ID" "$USER_ID" >"$CONTEXT/rootfs/etc/passwd"
printf 'root:x:0:\nrehearse:x:%s:\n' "$USER_ID" >"$CONTEXT/rootfs/etc/group"
chmod 0755 "$CONTEXT/work"
chmod 1777 "$CONTEXT/rootfs/tmp"
# No touch of the staged files' times survives into the layer digest
# unless their contents change: podman reuses its cached layers.
if [ "${1:-}" = "--context-only" ]; then
  echo "$CONTEXT"
  exit 0
fi

# 3. The image. No network is needed: FROM scratch pulls nothing.
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
podman build --quiet -f Containerfile -t "$IMAGE" \
  --build-arg VERSION="$VERSION" --build-arg REVISION="$REVISION" \
  "$CONTEXT"
echo "built $IMAGE (from $BINARY; $(du -h "$CONTEXT/rehearse" | cut -f1) stripped of debug information)"
