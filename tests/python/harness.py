"""harness.py: what the Python tests share (each is a plain script that
ctest runs: exit 0 pass, 1 fail, 77 skip).

    import harness
    SEED = harness.start()          # before importing torch
    import torch
    from harness import check, raises, raw
    ...
    return harness.finish(SEED)     # at the end of main()

start() skips the test (exit 77) when torch or safetensors cannot be
imported, prints the seed (STITCH_SEED=N replays a run) and seeds torch on
one thread. check() records a failure and goes on, so that one run reports
every failure; finish() prints the verdict and gives the exit status.
"""
import os
import random
import sys

NAME = os.path.splitext(os.path.basename(sys.argv[0]))[0]
FAILS = []


def start():
    try:
        import torch
        import safetensors.torch  # noqa: F401 (every test reads views)
    except ImportError as e:
        print("%s: SKIP: %s (run tools/setup-python.sh)" % (NAME, e))
        sys.exit(77)
    seed = int(os.environ.get("STITCH_SEED", random.randrange(1 << 31)))
    print("%s: Seed = %d" % (NAME, seed))
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    return seed


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("%s: FAIL: %s" % (NAME, what), file=sys.stderr)
    return cond


def raises(fn, name, contains, what):
    """fn() must raise StitchError NAME whose message contains CONTAINS;
    returns the error."""
    from stitch import StitchError
    try:
        fn()
    except StitchError as e:
        check(e.name == name and contains in str(e),
              "%s: got %s '%s', want %s containing '%s'"
              % (what, e.name, e, name, contains))
        return e
    check(False, "%s: no error raised" % what)


def raw(t):
    """A tensor's bytes, on the host."""
    return t.detach().to("cpu").contiguous().reshape(-1).view(
        __import__("torch").uint8)


def finish(seed):
    if FAILS:
        print("%s: %d failure(s) (seed %d)" % (NAME, len(FAILS), seed))
        return 1
    print("%s: OK" % NAME)
    return 0
