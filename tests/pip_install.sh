#!/bin/sh
# pip install ./python in a fresh venv (python/pyproject.toml: a wheel that
# carries libstitch.so.0, built by scikit-build-core, which pip fetches):
# then, with no PYTHONPATH and no STITCH_LIB, and no torch in the venv,
# import stitch must load the wheel's library (and not libuv, which only
# libstitch-net needs), say the CLI's version, open a
# store that the CLI published, apply its version to empty memory and get
# the checkpoint's bytes back, with the digests the CLI computed.
# usage: pip_install.sh SOURCE_DIR STITCH_CLI. PYTHON picks the interpreter.
# Skips (77) where python3 -m venv cannot make a venv with pip.
set -eu
src=$1 cli=$2
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "pip_install: $*" >&2; exit 1; }
unset PYTHONPATH STITCH_LIB
export PIP_DISABLE_PIP_VERSION_CHECK=1

"$py" -m venv "$tmp/venv" >"$tmp/venv.log" 2>&1 || true
if [ ! -x "$tmp/venv/bin/pip" ]; then
  cat "$tmp/venv.log"
  echo "pip_install: $py -m venv made no venv with pip (Debian: python3-venv), skipped"
  exit 77
fi
vpy=$tmp/venv/bin/python
start=$(date +%s)
# The wheel's library builds with every CPU (scikit-build-core's CMake
# build is otherwise one job at a time: minutes on a busy 2-core machine).
CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
  "$vpy" -m pip install "$src/python" >"$tmp/pip.log" 2>&1 ||
  { tail -n 40 "$tmp/pip.log" >&2; fail "pip install $src/python failed (all of it above)"; }
echo "pip_install: pip install took $(($(date +%s) - start)) s"

# The CLI makes a key, a checkpoint's first version in a store, and its digest.
cd "$tmp"
"$cli" keygen --out "$tmp/k" >/dev/null || fail "stitch keygen failed"
"$vpy" - <<'EOF' || fail "could not write the checkpoint"
import json, struct
data = bytes(range(256)) * 64  # BF16 [64, 128]
h = json.dumps({"w": {"dtype": "BF16", "shape": [64, 128],
                      "data_offsets": [0, len(data)]}}).encode()
h += b" " * (-len(h) % 8)
open("ckpt.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + data)
EOF
"$cli" publish --key "$tmp/k.key" --store "$tmp/store" "$tmp/ckpt.safetensors" --json \
  >"$tmp/publish.json" || fail "stitch publish failed"
"$cli" digest "$tmp/ckpt.safetensors" >"$tmp/digest" || fail "stitch digest failed"
"$cli" --version >"$tmp/version" || fail "stitch --version failed"

# From the temp folder, so that no checkout's python/ is on sys.path.
"$vpy" - <<'EOF' || fail "the installed package failed (above)"
import ctypes, importlib.util, json, os, sys
assert importlib.util.find_spec("torch") is None, "torch is in the test venv"
import stitch
import stitch._lib as L
where = os.path.realpath(L.lib_path)
assert where.startswith(os.path.realpath(sys.prefix) + os.sep), \
    "libstitch came from %s, not the venv" % where
assert os.path.realpath(stitch.__file__).startswith(os.path.realpath(sys.prefix)), \
    "stitch was imported from %s" % stitch.__file__
assert "torch" not in sys.modules, "import stitch imported torch"
# libstitch has no libuv (the driver is libstitch-net, not in the wheel).
assert "/libuv.so" not in open("/proc/self/maps").read(), "import stitch loaded libuv"
want = open("version").read().split(" ", 1)[1].strip()
assert stitch.version() == want, "version %r, the CLI's %r" % (stitch.version(), want)
print("pip_install: stitch %s from %s" % (stitch.version(), where))

pub = json.load(open("publish.json"))
s = stitch.Store("store", "k.pub")
v = s.find(s.latest())
assert v.version == pub["version"] and v.id.hex() == pub["id"], (v, pub)
assert v.view.hex() == open("digest").read().strip()
assert stitch.Checkpoint.open("ckpt.safetensors").view_digest() == v.view.hex()
name, dt, shape, nbytes, dg = v.tensors()[0]
buf = bytearray(nbytes)
addr = ctypes.addressof((ctypes.c_char * nbytes).from_buffer(buf))
p = s.patch(v.version, 0)
p.apply([addr], [nbytes])
p.close()
assert bytes(buf) == bytes(range(256)) * 64, "the applied version differs"
assert stitch.tensor_digest(dt, shape, addr, nbytes) == dg.hex()
s.close()
print("pip_install: version %d of the CLI's store applied, digests match" % v.version)
EOF
echo "pip_install: ok"
