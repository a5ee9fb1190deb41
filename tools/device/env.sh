# Sourced ON THE DEVICE: points pkg-config, CMake, the compiler and the loader at .deps/root.
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
