"""ctypes declarations of libstitch's public API (src/include/stitch/*.h).

Only what the Python side needs is declared. Structs mirror the C headers
field for field; a change there must be made here too. Every fallible call
goes through check(), which turns a negative STITCH_E* code and the
stitch_diag line into a StitchError, so no error passes silently.
"""
import ctypes
import os
import subprocess
from ctypes import (POINTER, Structure, c_char, c_char_p, c_double, c_int,
                    c_size_t, c_uint, c_uint8, c_uint32, c_uint64, c_void_p)

MAX_DIMS = 8
MAX_OBJECTS = 8
PLAN_MAX = 64
DIAG_MAX = 320


class StitchError(Exception):
    """A libstitch call failed. code is the STITCH_E* value, name its short
    name ("CHECKSUM", ...), message the library's one-line diagnostic."""

    def __init__(self, code, name, message):
        super().__init__(message)
        self.code, self.name, self.message = code, name, message


class Diag(Structure):
    _fields_ = [("msg", c_char * DIAG_MAX)]


class Digest(Structure):
    _fields_ = [("b", c_uint8 * 32)]

    def hex(self):
        return bytes(self.b).hex()

    def raw(self):
        return bytes(self.b)


class PubKey(Structure):
    _fields_ = [("b", c_uint8 * 32)]


class SecKey(Structure):
    _fields_ = [("b", c_uint8 * 64)]


class Tensor(Structure):  # stitch_tensor
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("ndim", c_int),
                ("shape", c_uint64 * MAX_DIMS), ("numel", c_uint64),
                ("nbytes", c_uint64), ("offset", c_uint64),
                ("data", c_void_p)]


class ViewOpts(Structure):
    _fields_ = [("kind", c_int), ("fp8_block", c_uint32)]


class ViewStats(Structure):
    _fields_ = [("tensors", c_uint64), ("scale_blocks", c_uint64),
                ("scales_changed", c_uint64)]


class ChunkRef(Structure):
    _fields_ = [("hash", Digest), ("size", c_uint64),
                ("first_block", c_uint64), ("n_blocks", c_uint64)]


class Object(Structure):
    _fields_ = [("kind", c_int), ("base_version", c_uint64),
                ("base_id", Digest), ("base_view", Digest),
                ("block_log2", c_uint32), ("tflags", POINTER(c_uint8)),
                ("n_chunks", c_uint64), ("chunks", POINTER(ChunkRef)),
                ("bytes", c_uint64)]


class MTensor(Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("ndim", c_int),
                ("shape", c_uint64 * MAX_DIMS), ("nbytes", c_uint64),
                ("digest", Digest)]


class Manifest(Structure):
    _fields_ = [("swarm", PubKey), ("version", c_uint64),
                ("parent_version", c_uint64), ("parent_id", Digest),
                ("time_unix", c_uint64), ("view", Digest), ("meta", c_char_p),
                ("n_tensors", c_uint64), ("tensors", POINTER(MTensor)),
                ("n_objects", c_uint64), ("objects", POINTER(Object))]


class VRef(Structure):
    _fields_ = [("m", POINTER(Manifest)), ("id", Digest)]


class PlanStep(Structure):
    _fields_ = [("version", c_uint64), ("object", c_uint32),
                ("bytes", c_uint64)]


class Plan(Structure):
    _fields_ = [("n", c_size_t), ("step", PlanStep * PLAN_MAX),
                ("bytes", c_uint64)]


PROGRESS = ctypes.CFUNCTYPE(None, c_void_p, c_char_p, c_uint64, c_uint64)


class PublishOpts(Structure):
    _fields_ = [("chunk_bytes", c_size_t), ("max_chain", c_uint),
                ("anchor_ratio", c_double), ("cumulative_every", c_uint),
                ("keep", c_uint), ("threads", c_uint), ("time_unix", c_uint64),
                ("sparse_mode", c_int),
                ("progress", PROGRESS), ("progress_arg", c_void_p)]


class PublishResult(Structure):
    _fields_ = [("version", c_uint64), ("id", Digest),
                ("view_bytes", c_uint64), ("n_objects", c_size_t),
                ("kind", c_int * MAX_OBJECTS), ("base", c_uint64 * MAX_OBJECTS),
                ("bytes", c_uint64 * MAX_OBJECTS),
                ("chunks", c_uint64 * MAX_OBJECTS)]


class PatchBlock(Structure):
    _fields_ = [("tensor", c_uint64), ("byte_off", c_uint64),
                ("byte_len", c_uint64)]


class Sparse(Structure):  # stitch_sparse
    _fields_ = [("n", c_uint64), ("width", c_uint32), ("pos", c_void_p),
                ("val", c_void_p)]


class PreparedInfo(Structure):  # stitch_prepared_info
    _fields_ = [("from_", c_uint64), ("to", c_uint64), ("to_id", Digest),
                ("n_tensors", c_size_t), ("steps", c_size_t),
                ("blocks", c_uint64), ("fetched", c_uint64),
                ("changes", c_uint64), ("whole", c_uint64),
                ("held_bytes", c_uint64), ("old_bytes", c_uint64),
                ("committed", c_int)]


class PreparedTensor(Structure):  # stitch_prepared_tensor
    _fields_ = [("sp", Sparse), ("old", c_void_p), ("whole", c_void_p),
                ("whole_old", c_void_p)]


class GpuList(Structure):  # stitch_gpu_list (stitch/gpu.h)
    _fields_ = [("width", c_int), ("n", c_uint64), ("pos", c_void_p),
                ("old_v", c_void_p), ("new_v", c_void_p)]


_P = c_void_p  # opaque handles: stitch_st, stitch_store, stitch_patch, ...
_D = POINTER(Diag)

# name: (restype, argtypes)
_PROTOS = {
    "stitch_version": (c_char_p, []),
    "stitch_strerror": (c_char_p, [c_int]),
    "stitch_errname": (c_char_p, [c_int]),
    "stitch_dtype_size": (c_size_t, [c_int]),
    "stitch_dtype_name": (c_char_p, [c_int]),
    "stitch_dtype_from_name": (c_int, [c_char_p]),
    "stitch_st_open": (c_int, [c_char_p, POINTER(_P), _D]),
    "stitch_st_parse": (c_int, [c_void_p, c_size_t, POINTER(_P), _D]),
    "stitch_st_free": (None, [_P]),
    "stitch_st_count": (c_size_t, [_P]),
    "stitch_st_tensor": (POINTER(Tensor), [_P, c_size_t]),
    "stitch_st_find": (POINTER(Tensor), [_P, c_char_p]),
    "stitch_st_metadata": (c_char_p, [_P]),
    "stitch_st_file_size": (c_uint64, [_P]),
    "stitch_st_writer_new": (c_int, [c_char_p, POINTER(_P), _D]),
    "stitch_st_writer_set_metadata": (c_int, [_P, c_char_p, _D]),
    "stitch_st_writer_add": (c_int, [_P, c_char_p, c_int, c_int,
                                     POINTER(c_uint64), _D]),
    "stitch_st_writer_map": (c_int, [_P, _D]),
    "stitch_st_writer_data": (c_void_p, [_P, c_size_t]),
    "stitch_st_writer_count": (c_size_t, [_P]),
    "stitch_st_writer_commit": (c_int, [_P, _D]),
    "stitch_st_writer_free": (None, [_P]),
    "stitch_tensor_digest": (c_int, [c_int, c_int, POINTER(c_uint64),
                                     c_void_p, c_uint64, POINTER(Digest)]),
    "stitch_tensor_digests": (c_int, [c_size_t, POINTER(POINTER(Tensor)),
                                      c_uint, POINTER(Digest)]),
    "stitch_view_digest": (c_int, [_P, POINTER(Digest), POINTER(Digest)]),
    "stitch_view_kind_parse": (c_int, [c_char_p, POINTER(c_int)]),
    "stitch_view_build": (c_int, [_P, _P, POINTER(ViewOpts), c_char_p,
                                  POINTER(ViewStats), _D]),
    "stitch_keygen": (c_int, [POINTER(PubKey), POINTER(SecKey)]),
    "stitch_key_write": (c_int, [c_char_p, POINTER(PubKey), POINTER(SecKey),
                                 _D]),
    "stitch_seckey_read": (c_int, [c_char_p, POINTER(SecKey), POINTER(PubKey),
                                   _D]),
    "stitch_pubkey_read": (c_int, [c_char_p, POINTER(PubKey), _D]),
    "stitch_pubkey_hex": (None, [POINTER(PubKey), c_char * 65]),
    "stitch_obj_kind_name": (c_char_p, [c_int]),
    "stitch_patch_new": (c_int, [POINTER(Manifest), c_size_t, POINTER(_P),
                                 _D]),
    "stitch_patch_free": (None, [_P]),
    "stitch_patch_add": (c_int, [_P, c_size_t, c_void_p, c_size_t, _D]),
    "stitch_patch_missing": (c_uint64, [_P]),
    "stitch_patch_block_count": (c_uint64, [_P]),
    "stitch_patch_block_at": (None, [_P, c_uint64, POINTER(PatchBlock)]),
    "stitch_patch_apply": (c_int, [_P, POINTER(c_void_p), POINTER(c_uint64),
                                   c_uint, _D]),
    "stitch_patch_scratch_bytes": (c_size_t, [_P]),
    "stitch_patch_decode_block": (c_int, [_P, c_uint64, c_void_p, c_void_p,
                                          _D]),
    "stitch_store_open": (c_int, [c_char_p, POINTER(PubKey), c_int,
                                  POINTER(_P), _D]),
    "stitch_store_close": (None, [_P]),
    "stitch_store_latest": (c_uint64, [_P]),
    "stitch_store_count": (c_size_t, [_P]),
    "stitch_store_at": (POINTER(VRef), [_P, c_size_t]),
    "stitch_store_find": (POINTER(VRef), [_P, c_uint64]),
    "stitch_store_get_chunk": (c_int, [_P, POINTER(Digest),
                                       POINTER(c_void_p), POINTER(c_size_t),
                                       _D]),
    "stitch_store_release": (None, [c_void_p, c_size_t]),
    "stitch_plan_path": (c_int, [POINTER(VRef), c_size_t, c_uint64,
                                 POINTER(Digest), c_uint64, POINTER(Plan),
                                 _D]),
    "stitch_prepared_new": (c_int, [_P, c_uint64, POINTER(Digest), c_uint64,
                                    POINTER(c_void_p), POINTER(c_uint64),
                                    c_uint, POINTER(c_uint8), POINTER(_P),
                                    _D]),
    "stitch_prepared_free": (None, [_P]),
    "stitch_gpu_available": (c_int, []),
    "stitch_gpu_apply": (c_int, [POINTER(GpuList), c_void_p, c_uint64, _D]),
    "stitch_gpu_ref_apply": (c_int, [POINTER(GpuList), c_void_p, c_uint64,
                                     _D]),
    "stitch_gpu_apply_batch": (c_int, [POINTER(GpuList), POINTER(c_void_p),
                                       POINTER(c_uint64), c_size_t, _D]),
    "stitch_gpu_ref_apply_batch": (c_int, [POINTER(GpuList),
                                           POINTER(c_void_p),
                                           POINTER(c_uint64), c_size_t, _D]),
    "stitch_prepared_summary": (None, [_P, POINTER(PreparedInfo)]),
    "stitch_prepared_tensor_at": (None, [_P, c_size_t,
                                         POINTER(PreparedTensor)]),
    "stitch_prepared_commit": (c_int, [_P, POINTER(c_void_p), c_uint, _D]),
    "stitch_prepared_revert": (c_int, [_P, POINTER(c_void_p), c_uint, _D]),
    "stitch_tensor_digests_patched": (c_int, [c_size_t,
                                              POINTER(POINTER(Tensor)),
                                              POINTER(Sparse), c_uint,
                                              POINTER(Digest), _D]),
    "stitch_publish": (c_int, [c_char_p, POINTER(SecKey), _P,
                               POINTER(PublishOpts), POINTER(PublishResult),
                               _D]),
}


SONAME = "libstitch.so.0"


def _pkg_config_libdir():
    """libstitch's libdir as pkg-config says (an installed tree or the
    .deb), or None where pkg-config or stitch.pc is not there."""
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "stitch"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def _find_library():
    """The library to load, first found of:
    1. STITCH_LIB (a file): an explicit choice wins over every default;
    2. libstitch.so.0 beside this module: what pip install ./python puts in
       the wheel;
    3. build/lib of this package's repository (a checkout), then its
       build-*/lib folders, newest first;
    4. the libdir of pkg-config's stitch.pc (cmake --install, the .deb);
    5. the dynamic linker's own search for the SONAME (ld.so.cache,
       LD_LIBRARY_PATH)."""
    env = os.environ.get("STITCH_LIB")
    if env:
        if not os.path.isfile(env):
            raise OSError("STITCH_LIB=%s: no such file" % env)
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    beside = os.path.join(here, SONAME)
    if os.path.isfile(beside):
        return beside
    root = os.path.dirname(os.path.dirname(here))
    cands = [os.path.join(root, "build", "lib", "libstitch.so")]
    try:
        extra = [os.path.join(root, e, "lib", "libstitch.so")
                 for e in os.listdir(root) if e.startswith("build-")]
    except OSError:
        extra = []
    extra = [p for p in extra if os.path.isfile(p)]
    cands += sorted(extra, key=os.path.getmtime, reverse=True)
    for c in cands:
        if os.path.isfile(c):
            return c
    libdir = _pkg_config_libdir()
    if libdir and os.path.isfile(os.path.join(libdir, SONAME)):
        return os.path.normpath(os.path.join(libdir, SONAME))
    return SONAME  # CDLL asks the dynamic linker; _load says if it fails


def _load():
    """The loaded library and the path (or name) it was loaded from."""
    path = _find_library()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        if path != SONAME:
            raise
        raise OSError("libstitch not found: pip install ./python (a wheel "
                      "that carries it), build it (cmake --build build), "
                      "install it (cmake --install, the .deb) or set "
                      "STITCH_LIB to its path (%s)" % e) from None
    for name, (res, args) in _PROTOS.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib, path


lib, lib_path = _load()


def errname(code):
    return lib.stitch_errname(code).decode()


def error(name, message):
    """A StitchError of code NAME ("EMISMATCH", ...) raised from Python,
    with the same code the C library would use."""
    for code in range(-1, -1100, -1):
        if errname(code) == name:
            return StitchError(code, name, message)
    raise ValueError("no stitch error named %r" % name)


def check(rc, diag=None, what=None):
    """Raises StitchError for a negative rc, with the diag line (or the
    code's message when the call has no diag) and WHAT as a prefix."""
    if rc >= 0:
        return rc
    msg = diag.msg.decode(errors="replace") if diag is not None else ""
    if not msg:
        msg = lib.stitch_strerror(rc).decode()
    if what:
        msg = "%s: %s" % (what, msg)
    raise StitchError(rc, errname(rc), msg)


def fspath(p):
    return os.fsencode(os.fspath(p))
