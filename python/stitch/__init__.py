"""Stitch for Python: a ctypes binding of libstitch, a Publisher for
trainers, an EngineAdapter for inference engines, and TRL interop.

    pip install ./python                 # a wheel that carries libstitch
    PYTHONPATH=python python3 -c 'import stitch'   # or, after the CMake build

libstitch.so is found through STITCH_LIB, else beside this package (the
wheel's), else build/lib (or a build-*/lib) of this repository, else
pkg-config's stitch.pc or the dynamic linker (an installed libstitch). See
docs/python.md.
"""
from ._lib import StitchError
from .binding import (Checkpoint, Patch, PublicKey, SecretKey, Store,
                      VersionInfo, build_view, keygen, publish, tensor_digest,
                      tensor_digests, version, write_checkpoint)

__all__ = ["StitchError", "Checkpoint", "Patch", "PublicKey", "SecretKey",
           "Store", "VersionInfo", "build_view", "keygen", "publish",
           "tensor_digest", "tensor_digests", "version", "write_checkpoint",
           "Publisher", "PublishResult", "EngineAdapter", "DigestMismatch",
           "tensors_for", "ModelAdapter"]


def __getattr__(name):
    # torch-dependent parts load on first use, so keys, stores and views
    # work where torch is not installed.
    if name in ("Publisher", "PublishResult"):
        from . import publisher
        return getattr(publisher, name)
    if name in ("EngineAdapter", "DigestMismatch", "tensors_for"):
        from . import engine
        return getattr(engine, name)
    if name == "ModelAdapter":  # stitch.vllm and stitch.sglang build on it
        from . import model_adapter
        return model_adapter.ModelAdapter
    raise AttributeError("module 'stitch' has no attribute %r" % name)
