#!/usr/bin/env bash
# Installs the Python side of Stitch's tools (torch, safetensors, numpy) from PyPI, CPU only, small and fast.
#
#   tools/setup-python.sh            install what is missing (does nothing when the smoke test already passes)
#   tools/setup-python.sh --check    only run the smoke test; exit 0 if usable, 1 if not
#   tools/setup-python.sh --full     install torch with all its CUDA dependencies (about 3 GB download, 5.4 GB)
#
# Environment: PYTHON (default python3) picks the interpreter; it installs into that interpreter's site-packages
# (or its active venv). STITCH_TORCH_VERSION (default below) pins torch for the lean install.
#
# Why the lean install looks like this: the Linux x86_64 torch wheel on PyPI is the CUDA build. Its libraries
# (libtorch_cuda.so, libtorch_python.so, ...) are linked against libcudart, libcublas, libcudnn, libnccl,
# libcufile, libcusparseLt, libnvshmem_host and more, so `pip install --no-deps torch` alone fails at
# `import torch` with e.g. "libcufile.so.0: cannot open shared object file". The default `pip install torch`
# pulls those libraries as nvidia-* wheels: about 3 GB to download and 5.4 GB on disk, none of which CPU
# training uses. The CPU-only wheels live on a separate index that we cannot reach (only PyPI is).
# So we install the torch wheel without dependencies (540 MB download, 1.2 GB on disk) and put small stub
# libraries for the CUDA sonames into torch/lib. The dynamic loader then resolves every CUDA symbol to a stub
# that returns an error code (cudaErrorInsufficientDriver, 35), so torch.cuda.is_available() is False and CPU
# code never calls them. torch/lib is searched last in torch's RUNPATH, after site-packages/nvidia/*/lib,
# so real nvidia-* wheels installed later take precedence over the stubs. The stubs are named in
# torch/lib/STITCH_CUDA_STUBS.txt. If the smoke test fails after stubbing, we fall back to the full install.
set -euo pipefail

PY=${PYTHON:-python3}
TORCH_VERSION=${STITCH_TORCH_VERSION:-2.15.0}
MODE=install
case "${1:-}" in
  "") ;;
  --check) MODE=check ;;
  --full) MODE=full ;;
  -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "setup-python.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
esac

# Smoke test: import, a few Adam steps of a tiny model on CPU, bf16 cast, a safetensors round trip.
smoke() {
  "$PY" - <<'EOF'
import os, sys, tempfile
import numpy, torch, safetensors.torch as st
torch.manual_seed(0)
torch.set_num_threads(1)
m = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 16))
opt = torch.optim.Adam(m.parameters(), lr=1e-3)
x = torch.randint(0, 16, (4, 6))
for _ in range(3):
    loss = torch.nn.functional.cross_entropy(m(x).reshape(-1, 16), x.reshape(-1))
    opt.zero_grad(); loss.backward(); opt.step()
assert torch.isfinite(loss)
sd = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in m.state_dict().items()}
with tempfile.TemporaryDirectory() as d:
    p = os.path.join(d, "t.safetensors")
    st.save_file(sd, p)
    back = st.load_file(p)
    assert all(torch.equal(back[k].view(torch.uint8), sd[k].view(torch.uint8)) for k in sd)
print(f"python deps OK: torch {torch.__version__} (cuda available: {torch.cuda.is_available()}), "
      f"safetensors {__import__('safetensors').__version__}, numpy {numpy.__version__}")
EOF
}

if smoke 2>/dev/null; then
  [ "$MODE" = full ] || exit 0
fi
[ "$MODE" = check ] && { echo "python deps missing or broken (run tools/setup-python.sh)" >&2; exit 1; }

# A stock Debian 12 python3 has no pip, and its environment is "externally managed" (PEP 668): install
# python3-pip, and let pip write into that interpreter (this is a build or CI machine, not a desktop).
if ! "$PY" -m pip --version >/dev/null 2>&1; then
  echo "setup-python: installing python3-pip" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
fi
PIP=("$PY" -m pip install --no-cache-dir --disable-pip-version-check --no-input --root-user-action=ignore)
if "$PY" -c 'import os, sys, sysconfig
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'; then
  PIP+=(--break-system-packages)
fi
t0=$(date +%s)
site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
before=$(du -sm "$site" 2>/dev/null | cut -f1)

full_install() {
  echo "setup-python: full install: torch with its CUDA dependencies (large)" >&2
  "${PIP[@]}" torch safetensors numpy
}

if [ "$MODE" = full ]; then
  full_install
else
  echo "setup-python: lean install: torch==$TORCH_VERSION without CUDA wheels, plus stubs" >&2
  # torch's pure-python requirements (minimums from its metadata); setuptools is only for building extensions.
  "${PIP[@]}" numpy safetensors filelock 'typing-extensions>=4.13.0' 'sympy>=1.13.3' 'networkx>=2.5.1' \
    jinja2 'fsspec>=0.8.5'
  # A torch that is already installed is kept (its CUDA libraries, if any, precede the stubs).
  if have=$("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null); then
    echo "setup-python: keeping the installed torch $have" >&2
  else
    "${PIP[@]}" --no-deps "torch==$TORCH_VERSION"
  fi
  command -v cc >/dev/null || { echo "setup-python: need a C compiler (apt-get install gcc) for the CUDA stubs" >&2; exit 1; }
  "$PY" - <<'EOF'
# Build a stub shared library for every CUDA soname that torch's libraries need, into torch/lib.
import glob, importlib.util, os, re, subprocess, sys, tempfile
torch_dir = importlib.util.find_spec("torch").submodule_search_locations[0]
lib_dir = os.path.join(torch_dir, "lib")
objs = sorted(glob.glob(os.path.join(lib_dir, "*.so")) + glob.glob(os.path.join(torch_dir, "_C*.so")))
cuda_re = re.compile(r"^lib(cuda|cu[A-Za-z]+|nv[A-Za-z_]+|nccl)\.so(\.\d+)*$")
own = {os.path.basename(p) for p in glob.glob(os.path.join(lib_dir, "*.so*"))}

def run(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout

needed, ver_file = set(), {}          # CUDA sonames needed; version name -> soname that defines it
syms = {}                             # soname -> {symbol: (type, version or None)}
unversioned = {}                      # symbol -> type, for undefined symbols without a version
defined = set()
for o in objs:
    for m in re.finditer(r"\(NEEDED\).*\[(.+?)\]", run("readelf", "-dW", o)):
        if cuda_re.match(m.group(1)) and m.group(1) not in own:
            needed.add(m.group(1))
    cur = None
    for line in run("readelf", "-VW", o).splitlines():
        m = re.search(r"File: (\S+)\s+Cnt:", line)
        if m:
            cur = m.group(1); continue
        m = re.search(r"Name: (\S+)\s+Flags:", line)
        if m and cur:
            ver_file[m.group(1)] = cur
    for line in run("readelf", "--dyn-syms", "-W", o).splitlines():
        f = line.split()
        if len(f) < 8 or not f[0].endswith(":"):
            continue
        typ, bind, ndx, name = f[3], f[4], f[6], f[7]
        if ndx != "UND":
            defined.add(name.split("@")[0]); continue
        if "@" in name:
            sym, ver = name.split("@", 1)
            ver = ver.split()[0]
            soname = ver_file.get(ver, ver)
            if cuda_re.match(soname):
                syms.setdefault(soname, {})[sym] = (typ, ver)
        elif bind == "GLOBAL":
            unversioned[name] = typ
# Unversioned undefined CUDA API symbols (cuFile*, cusparseLt*, nccl*, driver cu*) come from the CUDA libs that
# carry no symbol versions: give them to every stub; duplicates are harmless. Only CUDA API names: a stub must
# never shadow libstdc++, BLAS or anything else torch resolves lazily or leaves weak.
cuda_api = re.compile(r"^(cu[A-Z]|cuda|cublas|cudnn|cufft|cusolver|cusparse|curand|cupti|nccl|nvrtc|nvshmem|nvtx)")
unversioned = {s: t for s, t in unversioned.items() if s not in defined and cuda_api.match(s)}
sys.path.insert(0, os.path.dirname(torch_dir))
notes = []
with tempfile.TemporaryDirectory() as tmp:
    for soname in sorted(needed):
        mine = syms.get(soname, {})
        allsyms = {s: (t, v) for s, (t, v) in mine.items()}
        for s, t in unversioned.items():
            allsyms.setdefault(s, (t, None))
        src = ['/* generated by tools/setup-python.sh: CUDA stub for %s */' % soname,
               'static const char stitch_stub_msg[] = "CUDA stub (no CUDA in this install)";']
        for s, (t, v) in sorted(allsyms.items()):
            if t == "OBJECT":
                src.append("char %s[256];" % s)
            elif re.search(r"(Error|Status)(String|Name)|GetString$", s):
                src.append("const char *%s(void) { return stitch_stub_msg; }" % s)
            else:
                src.append("long %s(void) { return 35; }" % s)
        c = os.path.join(tmp, "stub.c"); open(c, "w").write("\n".join(src) + "\n")
        args = ["cc", "-shared", "-fPIC", "-O0", "-w", "-o", os.path.join(lib_dir, soname), c,
                "-Wl,-soname," + soname]
        vers = sorted({v for (_, v) in allsyms.values() if v})
        if vers:
            script = []
            for i, v in enumerate(vers):
                names = [s for s, (_, sv) in allsyms.items() if sv == v or (i == 0 and sv is None)]
                script.append("%s { global: %s; };" % (v, "; ".join(sorted(names))) if names else "%s { };" % v)
            vs = os.path.join(tmp, "stub.map"); open(vs, "w").write("\n".join(script) + "\n")
            args.append("-Wl,--version-script=" + vs)
        subprocess.run(args, check=True)
        notes.append("%s %d symbols" % (soname, len(allsyms)))
open(os.path.join(lib_dir, "STITCH_CUDA_STUBS.txt"), "w").write(
    "# CUDA stub libraries written by tools/setup-python.sh; delete them to undo\n" + "\n".join(notes) + "\n")
print("setup-python: wrote %d CUDA stubs into %s" % (len(notes), lib_dir), file=sys.stderr)
EOF
fi

if ! smoke; then
  if [ "$MODE" = full ]; then echo "setup-python: smoke test failed after the full install" >&2; exit 1; fi
  echo "setup-python: smoke test failed with the lean install; falling back to the full install" >&2
  full_install
  smoke
fi
after=$(du -sm "$site" 2>/dev/null | cut -f1)
echo "setup-python: done in $(( $(date +%s) - t0 )) s; site-packages grew by $(( after - before )) MB ($site)" >&2
