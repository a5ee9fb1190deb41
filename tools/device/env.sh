# Sourced ON THE DEVICE: points pkg-config, CMake, the compiler and the loader at .deps/root.
# CARD=H200 (any part of nvidia-smi's name for GPU 0): a sourcing script stops at once, rc 3, on another card. A call that
# asks for an H200 without needs_h200 may run on an H100, and a measurement meant for one card is not taken on the other.
if [ -n "${CARD:-}" ]; then
  hm_card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  case "$hm_card" in
    *"$CARD"*) echo "== card: $hm_card" ;;
    *) echo "== card: ${hm_card:-none found}, not $CARD: stopping"; exit 3 ;;
  esac
fi

root="$PWD/.deps/root"
for f in "$root"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$root"/usr/share/pkgconfig/*.pc; do
  [ -f "$f" ] && sed -i -E "s#^(prefix|exec_prefix|libdir|includedir)=/usr#\1=$root/usr#" "$f"
done
export PKG_CONFIG_PATH="$root/usr/lib/x86_64-linux-gnu/pkgconfig:$root/usr/share/pkgconfig:${PKG_CONFIG_PATH:-}"
export CMAKE_PREFIX_PATH="$root/usr:${CMAKE_PREFIX_PATH:-}"
export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
export CPATH="$root/usr/include:${CPATH:-}"
export LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu:${LIBRARY_PATH:-}"
export PATH="$PATH:/usr/local/cuda/bin"

# PREBUILT=1 with build-pre/bin.txz (or .tgz) carried (tools/device/prebuild.sh, run here): the binaries built
# on this machine's twin toolchain go to build-dev/ (and build-kt/) instead of a build on the device.
# Returns 1 (so the caller builds) when not asked for, or when a wanted target is missing.
hm_prebuilt() {   # hm_prebuilt TARGET...
  [ -n "${PREBUILT:-}" ] && { [ -f build-pre/bin.txz ] || [ -f build-pre/bin.tgz ]; } || return 1
  rm -rf build-alt build-alt-*
  if [ -f build-pre/bin.txz ]; then   # no xz there: Python's lzma unpacks it
    if command -v xz >/dev/null; then tar xJf build-pre/bin.txz || return 1
    else python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(filter="fully_trusted")' build-pre/bin.txz || return 1; fi
  else tar xzf build-pre/bin.tgz || return 1; fi
  echo "== prebuilt binaries of $(head -1 PREBUILT_COMMIT 2>/dev/null) $(sed -n 2p PREBUILT_COMMIT 2>/dev/null)$([ -f build-alt/COMMIT ] && echo ", alt $(cat build-alt/COMMIT)")"
  local t
  for t in "$@"; do [ -x "build-dev/$t" ] || [ -x "build-dev/tests/$t" ] || { echo "== prebuilt: no $t, building"; return 1; }; done
  return 0
}
