#!/usr/bin/env bash
# `stitch inspect` says where a delta's bytes go (docs/codec.md "Fixed
# bytes"), and the parts add up to the file: header + index (raw parts
# plus what zstd saves) + block parameters + coded changes, in the JSON
# and in the text; per tensor, parameters + coded changes are its encoded
# bytes and checksums 8 a coded block, and each coding's parameters have
# at least their fixed size. Over BF16, FP8 and NVFP4 trajectories, in
# every sparse mode, and a dense (F32) one. Then a published version:
# manifest + chunks are the version's bytes.
# Usage: cli_inspect.sh BIN_DIR
set -euo pipefail
bin="$1"
work="$(mktemp -d "${TMPDIR:-/tmp}/stitch-inspect.XXXXXX")"
trap 'rm -rf "$work"' EXIT

check_delta() { # delta file, label, its base (format 3 names its tensors by it)
  local d="$1" what="$2" base=()
  [ $# -lt 3 ] || base=(--base "$3")
  "$bin/stitch" inspect --json "$d" "${base[@]}" >"$work/i.json"
  "$bin/stitch" inspect "$d" "${base[@]}" >"$work/i.txt"
  python3 - "$d" "$work/i.json" "$work/i.txt" "$what" <<'PY'
import json, os, re, sys
path, jpath, tpath, what = sys.argv[1:]
size = os.path.getsize(path)
j = json.load(open(jpath))
b, t = j["bytes"], j["bytes"]["tensors"]
def fail(msg):
    sys.exit(f"FAIL: {what}: {msg}")
if b["file"] != size:
    fail(f"bytes.file {b['file']} != file size {size}")
parts = (b["header"] + b["index_head"] + b["index_packing"] + t["table"]
         + t["blocks"] + t["checksums"] + t["params"] + t["payload"])
if parts != size:
    fail(f"the parts add up to {parts}, the file is {size}")
if t["fixed"] != t["table"] + t["blocks"] + t["checksums"] + t["params"]:
    fail("tensors.fixed is not the sum of its parts")
# Formats 1 to 3: a 48-byte header; format 4: magic, format, flags, a
# varint and one checksum, 15 to 24 bytes; with the base's tensors it
# names the base by an 8-byte prefix of its digest.
if b["header"] != (48 if j["format"] <= 3 else b["header"]) or \
        (j["format"] >= 4 and not 15 <= b["header"] <= 24):
    fail(f"header {b['header']} in format {j['format']}")
if j["base_digest_bytes"] not in (8, 32) or \
        len(j["base_digest"]) != 2 * j["base_digest_bytes"] or \
        (j["base_digest_bytes"] == 8 and j["format"] < 4):
    fail(f"base digest {j['base_digest']} ({j['base_digest_bytes']} bytes)")
sums = {k: 0 for k in ("table", "blocks", "checksums", "params", "payload")}
MIN = {"sparse": 1, "gaps": 30, "rans": 5, "ransc": 5}
for x in j["tensors"]:
    xb = x["bytes"]
    for k in sums:
        sums[k] += xb[k]
    if xb["params"] + xb["payload"] != x["encoded_bytes"]:
        fail(f"{x['name']}: params + payload != encoded bytes")
    coded = sum(n for c, n in x["blocks"].items() if c != "same")
    if xb["checksums"] != (8 * coded if j["format"] == 1 else 0):
        fail(f"{x['name']}: checksums {xb['checksums']} for {coded} blocks")
    need = sum(MIN.get(c, 0) * n for c, n in x["blocks"].items())
    if xb["params"] < need:
        fail(f"{x['name']}: params {xb['params']} < {need} ({x['blocks']})")
    # Format 2 front-codes names: two lengths, a dtype, a dim count, flags;
    # formats 3 and 4 can name them by the base's (flags alone).
    if xb["table"] < (len(x["name"].encode()) + 4 if j["format"] == 1
                      else 5 if j["format"] == 2 else 1):
        fail(f"{x['name']}: table {xb['table']}")
for k, v in sums.items():
    if v != t[k]:
        fail(f"per-tensor {k} sums to {v}, the total says {t[k]}")
txt = open(tpath).read()
m = re.search(r"^bytes  file (\d+) = header (\d+) \+ index (-?\d+) \+ "
              r"payloads (\d+)$", txt, re.M)
if not m or int(m[1]) != size or int(m[2]) + int(m[3]) + int(m[4]) != size:
    fail("the text's bytes line does not add up to the file:\n" + txt)
m = re.search(r"^fixed  (\d+) B .*coded changes (\d+) B$", txt, re.M)
if not m or int(m[1]) + int(m[2]) != size:
    fail("the text's fixed line does not add up to the file")
used = sorted({c for x in j["tensors"] for c in x["blocks"]})
print(f"ok: {what}: {size} B, fixed {size - t['payload']} B; codings {used}")
PY
}

traj() { # name, then stitch-synth flags
  local name="$1"
  shift
  "$bin/stitch-synth" --out "$work/$name" --steps 2 --quiet "$@"
}

traj bf16 --params 2e6 --view bf16 --lr 3e-6   # RANSC by default
traj bf16s --params 2e6 --view bf16 --lr 3e-7  # GAPS
traj fp8 --params 3e5 --view fp8 --lr 1e-6
traj nvfp4 --params 3e5 --view nvfp4 --lr 1e-5
traj f32 --params 1e5 --view f32 --lr 1e-3
traj f32b --params 1e5 --view f32 --lr 1e-3 --seed 2
a=step_0001.safetensors
b=step_0002.safetensors
for t in bf16 bf16s fp8 nvfp4 f32; do
  for mode in "" --small --fastest; do
    "$bin/stitch" delta "$work/$t/$a" "$work/$t/$b" -o "$work/d" $mode
    check_delta "$work/d" "$t ${mode:-default}" "$work/$t/$a"
  done
done
# Format 1, as builds before format 2 wrote it (a checksum a block).
"$bin/stitch" delta "$work/nvfp4/$a" "$work/nvfp4/$b" -o "$work/d" --format 1
check_delta "$work/d" "nvfp4 --format 1"
[ "$(python3 -c 'import json,sys; print(json.load(sys.stdin)["format"])' <"$work/i.json")" = 1 ]
# Dense blocks: another seed's weights (XOR, PLANES), and an anchor (a
# delta from the empty checkpoint: every tensor NEW).
"$bin/stitch" delta "$work/f32/$a" "$work/f32b/$b" -o "$work/d"
check_delta "$work/d" "f32 against another seed" "$work/f32/$a"
printf '\002\000\000\000\000\000\000\000{}' >"$work/empty.safetensors"
"$bin/stitch" delta "$work/empty.safetensors" "$work/fp8/$b" -o "$work/d"
check_delta "$work/d" "fp8 anchor"
# Blocks as small as they go: many blocks a tensor, RANS in the fastest
# mode (blocks of 2^12 symbols and more).
"$bin/stitch" delta "$work/bf16/$a" "$work/bf16/$b" -o "$work/d" --block-log2 12 --fastest
check_delta "$work/d" "bf16 --block-log2 12 --fastest" "$work/bf16/$a"
# Format 4 (the default) names the base's tensors: without the base it
# does not parse (one line, saying how); --listed, --format 2 and a
# format 3 without its base's tensors list them.
[ "$(head -c 5 "$work/d" | od -An -c | tr -d ' ')" = "STDL004" ]
if "$bin/stitch" inspect "$work/d" 2>"$work/err"; then
  echo "FAIL: a delta naming the base's tensors parsed without it"; exit 1
fi
grep -q -- "--base BASE" "$work/err"
[ "$(wc -l <"$work/err")" = 1 ]
for f in --listed "--format 2" "--format 3 --listed"; do
  "$bin/stitch" delta "$work/nvfp4/$a" "$work/nvfp4/$b" -o "$work/d" $f
  check_delta "$work/d" "nvfp4 $f"
done
# Formats 3 and 4 with the base's tensors: the same coded changes; format
# 4 smaller by its header (48 -> 15-24 bytes), the base's digest (32 -> 8
# bytes), the payloads' checksum and the table byte; inspect says so, and
# prints the base's digest as the prefix it is.
"$bin/stitch" delta "$work/nvfp4/$a" "$work/nvfp4/$b" -o "$work/d3" --format 3
"$bin/stitch" delta "$work/nvfp4/$a" "$work/nvfp4/$b" -o "$work/d4"
check_delta "$work/d3" "nvfp4 --format 3" "$work/nvfp4/$a"
cp "$work/i.json" "$work/i3.json"
check_delta "$work/d4" "nvfp4 format 4" "$work/nvfp4/$a"
grep -q "^       base [0-9a-f]\{16\} (prefix)$" "$work/i.txt"
python3 - "$work/i3.json" "$work/i.json" <<'PY'
import json, sys
j3, j4 = (json.load(open(p)) for p in sys.argv[1:])
b3, b4 = j3["bytes"], j4["bytes"]
if (j3["format"], j4["format"]) != (3, 4) or j4["base_digest_bytes"] != 8:
    sys.exit(f"FAIL: formats {j3['format']}, {j4['format']}")
if j3["base_digest"][:16] != j4["base_digest"] or \
        j3["result_digest"] != j4["result_digest"]:
    sys.exit("FAIL: format 4's digests are not format 3's")
if b4["tensors"]["payload"] != b3["tensors"]["payload"]:
    sys.exit("FAIL: format 4 coded the changes differently")
if b3["index_head"] - b4["index_head"] != 24 + 8 + 1:
    sys.exit(f"FAIL: index heads {b3['index_head']} -> {b4['index_head']}")
saved = b3["file"] - b4["file"]
if saved < 48 - 24 + 24:
    sys.exit(f"FAIL: format 4 saved only {saved} B")
print(f"ok: format 3 -> 4: {b3['file']} -> {b4['file']} B "
      f"(header {b3['header']} -> {b4['header']})")
PY
# A damaged or truncated format-4 delta: one line, nonzero, nothing
# written by apply.
for cut in 3 10 $(($(stat -c %s "$work/d4") - 1)); do
  head -c "$cut" "$work/d4" >"$work/bad"
  if "$bin/stitch" apply "$work/nvfp4/$a" "$work/bad" -o "$work/r3.safetensors" \
    2>"$work/err"; then
    echo "FAIL: a delta cut to $cut bytes applied"; exit 1
  fi
  [ "$(wc -l <"$work/err")" = 1 ] && [ ! -e "$work/r3.safetensors" ]
  grep -q "shorter than its header\|checksum mismatch\|bad magic" "$work/err"
done
python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[30] ^= 1; open(sys.argv[2], "wb").write(b)' "$work/d4" "$work/bad"
if "$bin/stitch" inspect "$work/bad" --base "$work/nvfp4/$a" 2>"$work/err"; then
  echo "FAIL: a damaged delta parsed"; exit 1
fi
[ "$(wc -l <"$work/err")" = 1 ] && grep -q "checksum mismatch" "$work/err"
echo "ok: a damaged format-4 delta is refused ($(head -c 100 "$work/err"))"
# It applies to its base bit for bit (metadata included); another base
# with the same tensors is refused by its digest, and nothing is written.
"$bin/stitch" delta "$work/nvfp4/$a" "$work/nvfp4/$b" -o "$work/d"
"$bin/stitch" apply "$work/nvfp4/$a" "$work/d" -o "$work/r.safetensors"
cmp "$work/r.safetensors" "$work/nvfp4/$b"
if "$bin/stitch" apply "$work/nvfp4/$b" "$work/d" -o "$work/r2.safetensors" \
  2>"$work/err"; then
  echo "FAIL: a format-4 delta applied to the wrong base"; exit 1
fi
[ ! -e "$work/r2.safetensors" ]
echo "ok: format 4 applies to its base only ($(head -c 120 "$work/err"))"

# A published version: the manifest and every chunk, fixed and payload.
"$bin/stitch" keygen --out "$work/k" >/dev/null
for s in 0 1 2; do
  "$bin/stitch" publish --key "$work/k.key" --store "$work/st" \
    "$work/nvfp4/$(printf 'step_%04d.safetensors' $s)" >/dev/null
done
"$bin/stitch" inspect --store "$work/st" --pub "$work/k.pub" 3 --json >"$work/v.json"
"$bin/stitch" inspect --store "$work/st" --pub "$work/k.pub" 3 >"$work/v.txt"
python3 - "$work/st" "$work/v.json" "$work/v.txt" <<'PY'
import glob, json, os, re, sys
st, jpath, tpath = sys.argv[1:]
j = json.load(open(jpath))
man = glob.glob(os.path.join(st, "manifests", "%020d-*" % 3))
if len(man) != 1 or os.path.getsize(man[0]) != j["manifest_bytes"]:
    sys.exit(f"FAIL: version: manifest_bytes {j['manifest_bytes']}")
total = j["manifest_bytes"]
fixed = j["manifest_bytes"]
for o in j["objects"]:
    if o["chunk_heads"] + o["payloads"] != o["bytes"] or o["chunk_heads"] < 16 * o["chunks"]:
        sys.exit(f"FAIL: version: object {o}")
    total += o["bytes"]
    fixed += o["chunk_heads"]
if j["bytes"] != total or j["fixed"] != fixed:
    sys.exit(f"FAIL: version: bytes {j['bytes']} / fixed {j['fixed']}, "
             f"parts {total} / {fixed}")
m = re.search(r"^fixed  (\d+) B of (\d+) ", open(tpath).read(), re.M)
if not m or int(m[1]) != fixed or int(m[2]) != total:
    sys.exit("FAIL: version: the text's fixed line")
print(f"ok: version 3: {total} B, fixed {fixed} B")
PY
# Bad uses: one clear line, nonzero.
if "$bin/stitch" inspect --store "$work/st" --pub "$work/k.pub" 99 2>"$work/err"; then
  echo "FAIL: a version the store does not hold" >&2
  exit 1
fi
[ "$(wc -l <"$work/err")" = 1 ] && grep -q "no version 99" "$work/err"
set +e
"$bin/stitch" inspect --store "$work/st" 3 2>"$work/err"
rc=$?
set -e
[ $rc = 2 ] || { echo "FAIL: --store without --pub: exit $rc" >&2; exit 1; }
echo "ok: cli_inspect"
