#!/bin/sh
# cli_errors.sh BIN_DIR: the stitch CLI on hostile input.
#
# For truncated, bit-flipped, empty, missing, directory and wrong-magic
# inputs to `stitch apply`, `inspect`, `delta` and `digest`:
#   - the exit status is 1 (2 for usage errors);
#   - stderr is exactly one line, starting "stitch: error: " (or
#     "stitch: usage: "), and stdout is empty;
#   - the -o output does not exist afterwards, and no OUT.tmp.* is left.
# Inputs are made here with python3 (stdlib only; exit 77, a ctest skip,
# without it). Prints one line per failed check and exits 1 if any failed.
set -u
BIN_DIR=${1:?usage: cli_errors.sh BIN_DIR}
STITCH="$(cd "$BIN_DIR" 2>/dev/null && pwd)/stitch"
[ -x "$STITCH" ] || { echo "cli_errors: no $STITCH" >&2; exit 1; }
# The inputs are made with python3 (stdlib only); 77 tells ctest to skip.
command -v python3 >/dev/null 2>&1 || { echo "cli_errors: no python3" >&2; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/stitch-cli-errors-XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
FAILS=0
CHECKS=0
# A hang is a failure too: run each command under timeout(1) when present.
TMO=20
run() {
  if command -v timeout >/dev/null 2>&1; then
    timeout "$TMO" "$STITCH" "$@"
  else
    "$STITCH" "$@"
  fi
}

fail() {
  echo "FAIL: $*" >&2
  FAILS=$((FAILS + 1))
}

# expect STATUS OUT CMD...: runs CMD (a stitch command line); OUT is the
# path its -o names, or - when it has none.
expect() {
  want=$1 out=$2
  shift 2
  CHECKS=$((CHECKS + 1))
  desc="stitch $*"
  run "$@" >"$T/stdout" 2>"$T/stderr" </dev/null
  rc=$?
  if [ "$rc" -eq 124 ]; then
    fail "$desc: still running after $TMO s"
    return 0
  fi
  [ "$rc" -eq "$want" ] || fail "$desc: exit $rc, want $want"
  case $want in
  1) prefix="stitch: error: " ;;
  2) prefix="stitch: usage: " ;;
  esac
  n=$(wc -l <"$T/stderr")
  last=$(tail -c 1 "$T/stderr" | od -An -tx1 | tr -d ' \n')
  if [ "$n" -ne 1 ] || [ "$last" != "0a" ]; then
    fail "$desc: stderr is not exactly one line:"
    sed 's/^/    | /' "$T/stderr" >&2
  fi
  case $(head -n 1 "$T/stderr") in
  "$prefix"*) ;;
  *) fail "$desc: stderr does not start with '$prefix': $(head -n 1 "$T/stderr")" ;;
  esac
  [ -s "$T/stdout" ] && fail "$desc: wrote to stdout on failure"
  if [ "$out" != - ]; then
    [ -e "$out" ] && [ ! -d "$out" ] && fail "$desc: left $out behind"
    for f in "$out".tmp.*; do
      [ -e "$f" ] && fail "$desc: left temporary $f behind"
    done
  fi
  return 0
}

expect_ok() {
  CHECKS=$((CHECKS + 1))
  run "$@" >"$T/stdout" 2>"$T/stderr" </dev/null ||
    fail "stitch $*: exit $?, want 0: $(cat "$T/stderr")"
}

# ---- inputs ---------------------------------------------------------------
python3 - "$T" <<'EOF' || { echo "cli_errors: python3 failed" >&2; exit 1; }
import json, os, random, struct, sys

d = sys.argv[1]
rnd = random.Random(20240611)

def st(path, tensors, meta=None):
    """tensors: list of (name, dtype, shape, bytes)"""
    hdr, off, blob = {}, 0, b""
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dt, shape, data in tensors:
        hdr[name] = {"dtype": dt, "shape": shape,
                     "data_offsets": [off, off + len(data)]}
        off += len(data)
        blob += data
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-(8 + len(h)) % 8)
    with open(os.path.join(d, path), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + blob)

def bf16(n, jitter=0):
    out = bytearray()
    for i in range(n):
        v = 0x3c00 | rnd.randrange(0x400)
        out += struct.pack("<H", v)
    return out

w = bf16(64 * 32)
norm = struct.pack("<64f", *[1.0 + i / 128 for i in range(64)])
st("base.st", [("w", "BF16", [64, 32], bytes(w)), ("norm", "F32", [64], norm)],
   {"step": "1"})
w2 = bytearray(w)
for i in range(0, len(w2), 37):
    w2[i] ^= 1
st("new.st", [("w", "BF16", [64, 32], bytes(w2)), ("norm", "F32", [64], norm)],
   {"step": "2"})
w3 = bytearray(w)
w3[5] ^= 0x40
st("other.st", [("w", "BF16", [64, 32], bytes(w3)), ("norm", "F32", [64], norm)])
# Control characters in a tensor name must not break the one-line rule.
st("nl-base.st", [("a\nb", "U8", [512], bytes(rnd.randrange(256) for _ in range(512)))])
st("nl-new.st", [("a\nb", "U8", [512], bytes(rnd.randrange(256) for _ in range(512)))])
h = b'{"a\\nb":{"dtype":"U9","shape":[8],"data_offsets":[0,8]}}'
open(os.path.join(d, "nl-dtype.st"), "wb").write(
    struct.pack("<Q", len(h)) + h + b"\0" * 8)
open(os.path.join(d, "empty"), "wb").close()
open(os.path.join(d, "magic.bin"), "wb").write(b"hello, this is not a checkpoint\n")
open(os.path.join(d, "fake.delta"), "wb").write(b"STITCHDL" + b"\x01" * 100)
os.mkdir(os.path.join(d, "adir"))
os.mkdir(os.path.join(d, "out"))
EOF

cd "$T" || exit 1
expect_ok delta base.st new.st -o good.delta
expect_ok delta nl-base.st nl-new.st -o nl.delta

python3 - "$T" <<'EOF' || { echo "cli_errors: python3 failed" >&2; exit 1; }
import os, sys
d = sys.argv[1]
def rd(p): return open(os.path.join(d, p), "rb").read()
def wr(p, b): open(os.path.join(d, p), "wb").write(b)
def flip(b, i, m=0x01):
    b = bytearray(b); b[i] ^= m; return bytes(b)

s = rd("base.st")
hl = int.from_bytes(s[:8], "little")
wr("st-trunc-4", s[:4])
wr("st-trunc-8", s[:8])
wr("st-trunc-header", s[:8 + hl // 2])
wr("st-trunc-data", s[:len(s) - 100])
wr("st-trunc-last", s[:-1])
wr("st-flip-len", flip(s, 0))
wr("st-flip-len-high", flip(s, 7, 0x80))
wr("st-flip-brace", flip(s, 8, 0x20))          # '{' -> '['
wr("st-flip-json", flip(s, 8 + hl // 2, 0x40))
wr("st-trailing", s + b"\0" * 3)
wr("st-flip-data", flip(s, len(s) - 1))        # parses; wrong base for apply

dl = rd("good.delta")
wr("dl-trunc-10", dl[:10])
wr("dl-trunc-47", dl[:47])
wr("dl-trunc-48", dl[:48])
wr("dl-trunc-half", dl[:len(dl) // 2])
wr("dl-trunc-last", dl[:-1])
wr("dl-flip-magic", flip(dl, 0))
wr("dl-flip-header", flip(dl, 20))
wr("dl-flip-hsum", flip(dl, 44))
wr("dl-flip-index", flip(dl, 60))
wr("dl-flip-payload", flip(dl, len(dl) - 2))
wr("dl-trailing", dl + b"x")
nl = rd("nl.delta")
wr("nl-flip-payload", flip(nl, len(nl) - 2))
EOF

O=out/res.st

# ---- apply -------------------------------------------------------------------
expect_ok apply base.st good.delta -o out/ok.st
rm -f out/ok.st
for f in st-trunc-4 st-trunc-8 st-trunc-header st-trunc-data st-trunc-last \
         st-flip-len st-flip-len-high st-flip-brace st-flip-json st-trailing \
         st-flip-data other.st new.st empty magic.bin fake.delta missing.st \
         adir; do
  expect 1 $O apply $f good.delta -o $O
done
for f in dl-trunc-10 dl-trunc-47 dl-trunc-48 dl-trunc-half dl-trunc-last \
         dl-flip-magic dl-flip-header dl-flip-hsum dl-flip-index \
         dl-flip-payload dl-trailing empty magic.bin fake.delta missing.delta \
         adir base.st; do
  expect 1 $O apply base.st $f -o $O
done
expect 1 $O apply nl-base.st nl-flip-payload -o $O
expect 1 nodir/res.st apply base.st good.delta -o nodir/res.st
expect 1 adir apply base.st good.delta -o adir
expect 1 $O apply base.st good.delta -o "$O/"

# ---- inspect -----------------------------------------------------------------
for f in st-trunc-4 st-trunc-8 st-trunc-header st-trunc-data st-trunc-last \
         st-flip-len st-flip-len-high st-flip-brace st-flip-json st-trailing \
         dl-trunc-10 dl-trunc-47 dl-trunc-48 dl-trunc-half dl-trunc-last \
         dl-flip-header dl-flip-hsum dl-flip-index dl-trailing \
         empty magic.bin fake.delta missing adir nl-dtype.st; do
  expect 1 - inspect $f
  expect 1 - inspect --json $f
done

# ---- digest ------------------------------------------------------------------
for f in st-trunc-4 st-trunc-8 st-trunc-header st-trunc-data st-trunc-last \
         st-flip-len st-flip-brace st-flip-json st-trailing good.delta \
         empty magic.bin missing adir nl-dtype.st; do
  expect 1 - digest $f
  expect 1 - digest --tensors $f
done

# ---- delta -------------------------------------------------------------------
for f in st-trunc-8 st-trunc-header st-trunc-data st-flip-len st-flip-json \
         good.delta empty magic.bin missing adir nl-dtype.st; do
  expect 1 $O delta $f new.st -o $O
  expect 1 $O delta base.st $f -o $O
done
expect 1 nodir/d.delta delta base.st new.st -o nodir/d.delta
expect 1 $O delta base.st new.st -o $O --block-log2 99

# ---- not regular files -----------------------------------------------------
# A FIFO must be refused, not waited on (open(2) blocks until a writer).
if mkfifo fifo 2>/dev/null; then
  TMO=3
  expect 1 - digest fifo
  expect 1 - inspect fifo
  expect 1 $O apply fifo good.delta -o $O
  expect 1 $O apply base.st fifo -o $O
  expect 1 $O delta base.st fifo -o $O
  TMO=20
fi
expect 1 - digest /dev/null
expect 1 $O apply base.st /dev/null -o $O

# ---- store commands: verify, pull, recover --------------------------------
expect_ok keygen --out key
expect_ok publish --key key.key --store store base.st
expect_ok publish --key key.key --store store new.st
expect 1 - verify --store nostore --pub key.pub
expect 1 - verify --store store --pub missing.pub
expect 1 - verify --store store --pub base.st
expect 1 - verify --store base.st --pub key.pub
expect 1 out/w.st pull --store nostore --pub key.pub --weights out/w.st
expect 1 - pull --store store --pub key.pub --weights adir
expect 1 - pull --store store --pub key.pub --weights magic.bin
expect 1 - recover --weights adir
# `latest` moved back by hand (to version 1, under its id) or garbled.
cp -r store store-back
id1=$(ls store/manifests | sed -n 's/^0*1-//p')
printf '1 %s\n' "$id1" >store-back/latest
expect 1 - verify --store store-back --pub key.pub
printf 'garbage\n' >store-back/latest
expect 1 - verify --store store-back --pub key.pub
expect 1 out/w.st pull --store store-back --pub key.pub --weights out/w.st
# A chunk with other bytes: pull fails and leaves it; verify names it.
cp -r store store-bad
c=$(find store-bad/chunks -type f | sort | head -n 1)
printf 'x' | dd of="$c" bs=1 seek=3 conv=notrunc 2>/dev/null
cp "$c" chunk-before
expect 1 - pull --store store-bad --pub key.pub --weights wbad.st
cmp -s "$c" chunk-before || fail "pull changed or removed the bad chunk $c"
expect 1 - verify --store store-bad --pub key.pub
# Nothing to recover is not an error.
expect_ok recover --weights base.st
expect_ok recover --weights out/none.st
expect 2 - recover
expect 2 - recover --weights
expect 2 - verify --store store
expect 2 - pull --store store --pub key.pub

# ---- --version -----------------------------------------------------------------
CHECKS=$((CHECKS + 1))
case "$(run --version)" in
"stitch "[0-9]*.[0-9]*.[0-9]*" (wire protocol "[0-9]*")") ;;
*) fail "stitch --version: '$(run --version)'" ;;
esac

# ---- help ----------------------------------------------------------------------
# stitch help [COMMAND] and stitch COMMAND --help: the usage on stdout, 0.
for c in view delta apply inspect digest keygen admit revoke publish pull \
  verify log recover; do
  CHECKS=$((CHECKS + 1))
  out=$(run $c --help 2>"$T/stderr") || fail "stitch $c --help: exit $?"
  case "$out" in "usage: stitch $c "*) ;; *) fail "stitch $c --help: '$out'" ;; esac
  [ "$(run help $c 2>/dev/null)" = "$out" ] || fail "stitch help $c differs"
done
CHECKS=$((CHECKS + 1))
case "$(run help)" in "usage: stitch COMMAND"*) ;; *) fail "stitch help" ;; esac
expect 2 - help bogus
expect 2 - bogus
expect 2 - help verify extra
expect 2 - verify --store store --pub key.pub --deep # not an option

# ---- stitchd: usage errors exit 2, failures 1, one line each -------------------
STITCHD="$(dirname "$STITCH")/stitchd"
if [ -x "$STITCHD" ]; then
  # agent STATUS WANT ARGS...: stitchd ARGS exits STATUS with one line on
  # stderr that holds WANT.
  agent() {
    want=$1 msg=$2
    shift 2
    CHECKS=$((CHECKS + 1))
    timeout "$TMO" "$STITCHD" "$@" >"$T/stdout" 2>"$T/stderr" </dev/null
    rc=$?
    [ "$rc" = "$want" ] || fail "stitchd $*: exit $rc, want $want"
    [ "$(wc -l <"$T/stderr")" -le 1 ] && grep -q -- "$msg" "$T/stderr" ||
      fail "stitchd $*: stderr '$(cat "$T/stderr")', want one line with '$msg'"
  }
  agent 2 "unknown command 'bogus'" bogus
  agent 2 "unknown option '--bogus'" node --bogus
  agent 2 "unknown option '--bogus'" node --swarm key.pub --bogus
  agent 2 "--swarm needs a value" node --swarm
  agent 2 "not an option of stitchd seed" seed --weights w.st
  agent 2 "unexpected argument 'extra'" node extra
  agent 2 "stitchd node needs --" node --listen 127.0.0.1:0
  agent 2 "max-peers" node --swarm key.pub --listen 127.0.0.1:0 \
    --weights w.st --data agent-data --max-peers 0
  agent 2 "up-mbit" node --swarm key.pub --listen 127.0.0.1:0 \
    --weights w.st --data agent-data --up-mbit 10x
  agent 2 "not an option of stitchd seed" seed --up-mbit 100
  agent 2 "log-chunks: 'maybe' is not yes or no" node --swarm key.pub \
    --listen 127.0.0.1:0 --weights w.st --data agent-data --log-chunks=maybe
  # A control byte in any value (a region or an address ends up in log
  # lines, where a newline would forge one), on the command line or in a
  # config file.
  agent 2 "--region: holds the control byte 0x0a" node --swarm key.pub \
    --listen 127.0.0.1:0 --weights w.st --data agent-data \
    --region "$(printf 'us\nstitchd[node]: forged')"
  printf 'region us\033[2J\n' >"$T/ctl.conf"
  agent 2 "ctl.conf:1: region: holds the control byte 0x1b" node \
    --config "$T/ctl.conf" --swarm key.pub --listen 127.0.0.1:0 \
    --weights w.st --data agent-data
  agent 2 "need --http" node --swarm key.pub --listen 127.0.0.1:0 \
    --weights w.st --data agent-data --engine http://127.0.0.1:1
  agent 1 "missing.pub" node --swarm missing.pub --listen 127.0.0.1:0 \
    --weights w.st --data agent-data
  CHECKS=$((CHECKS + 1))
  "$STITCHD" >/dev/null 2>&1
  [ $? = 2 ] || fail "stitchd with no arguments: want exit 2"
  CHECKS=$((CHECKS + 1))
  "$STITCHD" node --help | grep -q "^usage: stitchd node" ||
    fail "stitchd node --help: no usage on stdout"
fi

# ---- admission: admit, revoke ------------------------------------------------
expect_ok keygen --out n1
expect_ok admit --key key.key --node n1.pub --out t1 --expires 30d
[ "$(cut -c1-14 t1)" = "stitch-ticket " ] || fail "t1 is not a ticket file"
expect 1 - admit --key key.key --node n1.pub --out t1 # not overwritten
expect 1 t2 admit --key key.pub --node n1.pub --out t2 # a public key
expect 1 t2 admit --key key.key --node n1.key --out t2 # a secret key
expect 1 t2 admit --key key.key --node missing.pub --out t2
expect 1 nodir/t admit --key key.key --node n1.pub --out nodir/t
expect 2 t2 admit --key key.key --node n1.pub --out t2 --expires soon
expect 2 t2 admit --key key.key --node n1.pub --out t2 --expires 0x5d
expect 2 t2 admit --key key.key --node n1.pub --out t2 --role king
expect 2 - admit --key key.key --node n1.pub
expect_ok revoke --key key.key --store store --node n1.pub
[ -s store/policy ] || fail "revoke wrote no store/policy"
expect_ok revoke --key key.key --store store --node n1.pub # said already
expect 1 - revoke --key key.key --store store --node missing.pub
expect 1 - revoke --key n1.key --store store --node n1.pub # another swarm
expect 2 - revoke --key key.key --store store

# ---- usage -------------------------------------------------------------------
expect 2 - apply
expect 2 - apply base.st good.delta
expect 2 $O apply base.st -o $O
expect 2 $O apply base.st good.delta extra -o $O
expect 2 $O delta base.st new.st -o $O --small --fastest
expect 2 $O delta base.st new.st -o $O --threads many
expect 2 $O delta base.st new.st -o $O --threads -1
expect 2 $O delta base.st new.st -o $O --block-log2 x
expect 2 $O delta base.st new.st -o $O --level fast
expect 1 $O delta base.st new.st -o $O --level 99
expect 2 - apply base.st good.delta -o
expect 2 $O apply base.st good.delta -o $O --bogus
expect 2 - inspect
expect 2 - inspect base.st new.st
expect 2 - inspect --bogus base.st
expect 2 - digest
expect 2 - digest --bogus base.st
expect 2 - delta base.st new.st
expect 2 $O delta base.st -o $O
expect 2 - delta base.st new.st -o

# Nothing but the inputs may remain in out/.
left=$(ls -A out)
[ -z "$left" ] || fail "files left in out/: $left"

echo "cli_errors: $CHECKS checks, $FAILS failed"
[ "$FAILS" -eq 0 ]
