#!/bin/sh
# Builds rnic's libibverbs-compatible library: target/rnic-ibverbs/libibverbs.so.1 (the
# rnic-ibverbs crate's staticlib linked with rdma-core's symbol versions), plus stand-ins
# for the vendor libraries perftest links (libmlx5.so.1, libefa.so.1).
#
#   scripts/build-ibverbs.sh            # release build (what `rnic exec` uses)
#   scripts/build-ibverbs.sh --debug    # debug build, into target/rnic-ibverbs-debug/
#
# Then: LD_LIBRARY_PATH=target/rnic-ibverbs ibv_devices   (or: rnic exec -- ibv_devices)
# Needs a C compiler (cc) for the final link, as any Rust staticlib does.
set -eu
cd "$(dirname "$0")/.."
profile=release
out=target/rnic-ibverbs
cargo_flag=--release
if [ "${1:-}" = "--debug" ]; then
    profile=debug
    out=target/rnic-ibverbs-debug
    cargo_flag=
fi
command -v cc >/dev/null || { echo "build-ibverbs: needs a C compiler (cc) for the link: apt-get install gcc" >&2; exit 1; }
cargo build $cargo_flag -p rnic-ibverbs --lib
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
lib="$target_dir/$profile/librnic_ibverbs.a"
[ -f "$lib" ] || { echo "build-ibverbs: $lib was not built" >&2; exit 1; }
mkdir -p "$out"
tmp="$out/.libibverbs.so.1.tmp"
# The libraries a Rust staticlib needs on Linux (rustc --print native-static-libs).
cc -shared -o "$tmp" \
    -Wl,-soname,libibverbs.so.1 \
    -Wl,--version-script=rnic-ibverbs/libibverbs.map \
    -Wl,--whole-archive "$lib" -Wl,--no-whole-archive \
    -Wl,-z,now -Wl,--gc-sections \
    -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
mv "$tmp" "$out/libibverbs.so.1"
ln -sf libibverbs.so.1 "$out/libibverbs.so"
for v in mlx5 efa; do
    V=$(echo $v | tr a-z A-Z)
    cc -shared -fPIC -O2 -o "$out/lib$v.so.1" -DRNIC_$V rnic-ibverbs/stubs/vendor.c \
        -Wl,-soname,lib$v.so.1 -Wl,--version-script=rnic-ibverbs/stubs/lib$v.map
done
echo "build-ibverbs: $out/libibverbs.so.1 ($(wc -c < "$out/libibverbs.so.1") bytes), libmlx5.so.1, libefa.so.1"
echo "build-ibverbs: run a program on rnic with: LD_LIBRARY_PATH=$out PROGRAM (or: rnic exec -- PROGRAM)"
