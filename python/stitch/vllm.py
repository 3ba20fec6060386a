"""A vLLM worker extension: every tensor-parallel worker brings its own
shard of the model to each Stitch version, in two phases
(docs/python.md "Engines: vLLM and SGLang").

    vllm serve MODEL --tensor-parallel-size 2 \\
        --worker-extension-cls stitch.vllm.StitchWorkerExtension
    # or LLM(model=...,
    #        worker_extension_cls="stitch.vllm.StitchWorkerExtension")

    llm.collective_rpc("stitch_init", args=("store", "trainer.pub", 1))
    llm.collective_rpc("stitch_prepare")          # one summary per worker
    pauses = llm.collective_rpc("stitch_commit")  # between batches
    llm.reset_prefix_cache()                      # cached KV is stale

What this relies on in vLLM (vllm-project/vllm, read through the search
index's copies; none of it was run here):
- vllm/v1/worker/worker_base.py (at 0243225317f5),
  WorkerWrapperBase.init_worker: the class
  named by parallel_config.worker_extension_cls is appended to the worker
  class's __bases__, after an assertion that the worker class has none of
  its attributes (every name not starting with "__", so our helpers are
  prefixed _stitch). collective_rpc("method", args=..., kwargs=...) then
  runs the method on every worker (WorkerWrapperBase.execute_method,
  run_method) and returns their results in rank order; a worker's
  exception comes back as an error naming it.
- examples/offline_inference/rlhf_utils.py (at 081b8e32277e;
  WorkerExtension, ColocateWorkerExtension): the model is
  self.model_runner.model; weights go in through its
  load_weights(weights=[(name, tensor)]) with checkpoint names and full
  tensors, on every worker; after loading, the colocated example calls
  process_weights_after_loading(model, self.model_config, self.device).
- vllm/model_executor/models/llama.py, LlamaModel.load_weights: each
  checkpoint name goes to its parameter's weight_loader, which narrows
  the full tensor to the worker's shard; stacked_params_mapping sends
  q_proj/k_proj/v_proj to qkv_proj and gate_proj/up_proj to gate_up_proj
  with a shard id; rotary_emb.inv_freq is skipped. So a worker's shard
  follows from the full tensors alone, whatever the model's layout.

Nothing imports vLLM at module import: the one vLLM import
(process_weights_after_loading) is made inside a method, and skipped where
vLLM is absent (the stand-in workers of tests/python/test_engines_ext.py).
"""
from .model_adapter import ModelAdapter


def _after_load(worker):
    """vLLM's post-load hook for the worker's model, or None without vLLM.
    The colocated RLHF example runs it after every load; for an unquantized
    model it is cheap, and models that derive weights at load time (MLA's
    absorbed matrices) need it."""
    try:
        from vllm.model_executor.model_loader.utils import \
            process_weights_after_loading
    except ImportError:
        return None
    model = worker.model_runner.model

    def run():
        process_weights_after_loading(model, worker.model_config,
                                      worker.device)
    return run


class StitchWorkerExtension:
    """Mixed into vLLM's Worker by --worker-extension-cls. Every method runs
    on each worker through collective_rpc; results are plain values."""

    def stitch_init(self, store_dir, swarm_pub, version=None, mode="auto",
                    threads=0, follow_s=None, process_after_load=True):
        """Wraps this worker's model (self.model_runner.model) in a
        ModelAdapter. version: the version the engine was started from
        (the store's view of it, or the checkpoint it was published from);
        None when unknown: the first commit then loads every tensor. mode:
        "auto", "direct" (the model's tensors are the view's one for one)
        or "load_weights" (a CPU mirror of the view, fed through the
        model's load_weights: any tensor parallelism, any fusion).
        threads: prepare's CPU threads on this worker (0: all; give each
        of a node's workers its share). follow_s: prepare each new version
        on a thread as the store gets it, polling every FOLLOW_S seconds.
        Returns stitch_status()."""
        old = getattr(self, "_stitch_adapter", None)
        if old is not None:
            old.unfollow()
        after = _after_load(self) if process_after_load else None
        self._stitch_adapter = ModelAdapter(
            self.model_runner.model, store_dir, swarm_pub, version=version,
            mode=mode, threads=threads, after_load=after)
        if follow_s:
            self._stitch_adapter.follow(follow_s)
        return self.stitch_status()

    def _stitch(self):
        ad = getattr(self, "_stitch_adapter", None)
        if ad is None:
            raise RuntimeError("stitch: call stitch_init on every worker "
                               "first")
        return ad

    def stitch_prepare(self, version=None, background=False):
        """Prepares VERSION (default the store's latest) on this worker
        while it serves; writes nothing the model reads. Returns {version,
        from, mode, changes, tensors, load, held_bytes, mirror_bytes,
        prepare_s}. A collective_rpc holds the worker for the call, so a
        long prepare stalls its serving: background=True starts it on a
        thread and returns None; stitch_wait() or stitch_commit() collect
        it."""
        return self._stitch().prepare(version, background=background)

    def stitch_wait(self, timeout=None):
        """The outcome of a background prepare (None while it runs)."""
        return self._stitch().wait(timeout)

    def stitch_commit(self):
        """The pause: writes the prepared version into this worker's shard.
        Returns the pause in seconds."""
        return self._stitch().commit()

    def stitch_discard(self):
        self._stitch().discard()

    def stitch_version(self):
        """The version this worker's model holds (0: none known; None: a
        commit failed midway, stitch_commit() again completes it)."""
        return self._stitch().version

    def stitch_status(self):
        st = self._stitch().status()
        st["rank"] = getattr(self, "rank", None)
        return st
