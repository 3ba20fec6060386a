/* quant.cu: FP32 masters to the served views (C references:
 * stitch_gpu_ref_quant_* in src/gpu/quant.c, which call the view builder).
 *
 * The per-element and per-block arithmetic is gpu_math.h, the same code the
 * CPU runs in gpu_emul_quant_*, which the tests hold to the codec.
 *
 * Block maxima: one warp per chunk of at most CHUNK elements of one scale
 * block, lanes reading consecutive floats, a shuffle reduction, and one
 * atomicMax per chunk on the float's bits (|x| >= 0 orders like its bits).
 * Small FP8 blocks thus cost one warp each, and a whole-tensor scale (block
 * 0, or NVFP4's tensor scale) is n / CHUNK warps. The same pass records the
 * first non-finite element, which fails the view as the reference does.
 *
 * NVFP4's tensor scale is one decision per tensor with log2 and frexp in
 * it; the host makes it (gpu_nvfp4_s2) from the device's tensor maximum,
 * then one thread per 16-element block does the rest. */
#include "cu_common.cuh"

#define CHUNK 4096u

__global__ void k_block_amax(const float *x, uint64_t n, uint64_t bs,
                             uint64_t chunks_per_block, uint64_t chunks,
                             unsigned *amax_bits, unsigned long long *bad) {
  uint64_t warp = (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) / 32;
  uint64_t warps = (uint64_t)gridDim.x * blockDim.x / 32;
  unsigned lane = threadIdx.x & 31;
  for (uint64_t g = warp; g < chunks; g += warps) {
    uint64_t b = g / chunks_per_block, c = g % chunks_per_block;
    uint64_t lo = b * bs + c * CHUNK;
    uint64_t hi = lo + CHUNK;
    if (hi > (b + 1) * bs)
      hi = (b + 1) * bs;
    if (hi > n)
      hi = n;
    unsigned m = 0;
    for (uint64_t i = lo + lane; i < hi; i += 32) {
      unsigned a = __float_as_uint(x[i]) & 0x7FFFFFFFu;
      if (a >= 0x7F800000u)
        atomicMin(bad, (unsigned long long)i);
      else
        m = a > m ? a : m;
    }
    for (int off = 16; off > 0; off /= 2) {
      unsigned o = __shfl_xor_sync(0xFFFFFFFFu, m, off);
      m = o > m ? o : m;
    }
    if (lane == 0 && lo < hi)
      atomicMax(&amax_bits[b], m);
  }
}

/* Maxima of |x| over NB blocks of BS elements (the last may be short) into
 * AMAX (device, NB words); *BAD_HOST gets the first non-finite index or
 * UINT64_MAX. */
static int block_amax(const float *x, uint64_t n, uint64_t bs, uint64_t nb,
                      unsigned *amax, uint64_t *bad_host, stitch_diag *d) {
  unsigned long long *bad = NULL, hb = 0;
  int rc = 0;
  uint64_t cpb = (bs + CHUNK - 1) / CHUNK, chunks = cpb * nb;
  CU_GO(cudaMallocAsync((void **)&bad, sizeof(*bad), 0));
  CU_GO(cudaMemsetAsync(bad, 0xFF, sizeof(*bad), 0));
  CU_GO(cudaMemsetAsync(amax, 0, nb * sizeof(*amax), 0));
  if (chunks > 0) {
    k_block_amax<<<cu_blocks(chunks * 32), CU_THREADS>>>(x, n, bs, cpb,
                                                         chunks, amax, bad);
    CU_GO(cudaGetLastError());
  }
  CU_GO(cudaMemcpyAsync(&hb, bad, sizeof(hb), cudaMemcpyDeviceToHost, 0));
  CU_GO(cudaStreamSynchronize(0));
  *bad_host = hb;
out:
  if (bad != NULL)
    (void)cudaFreeAsync(bad, 0);
  return rc;
}

static int check_master(const uint8_t *master, uint64_t n, stitch_diag *d) {
  RETURN_IF((uintptr_t)master % 4 != 0, d, STITCH_EINVAL,
            "quantize: device masters must be 4-byte aligned");
  RETURN_IF(n > (UINT64_MAX >> 4), d, STITCH_ELIMIT,
            "quantize: %llu elements are too many", (unsigned long long)n);
  return 0;
}

/* ---- BF16 ---------------------------------------------------------------- */

__global__ void k_bf16(const float *x, uint64_t n, uint8_t *out) {
  CU_FOR(i, n) {
    uint16_t h = mf_f32_to_bf16(x[i]);
    out[2 * i] = (uint8_t)h;
    out[2 * i + 1] = (uint8_t)(h >> 8);
  }
}

extern "C" int gpu_cu_quant_bf16(const uint8_t *master, uint64_t n,
                                 uint8_t *out, stitch_diag *d) {
  CHECK_RC(check_master(master, n, d));
  if (n == 0)
    return 0;
  k_bf16<<<cu_blocks(n), CU_THREADS>>>((const float *)master, n, out);
  CU_RET(cudaGetLastError());
  CU_RET(cudaStreamSynchronize(0));
  return 0;
}

/* ---- FP8 E4M3 ------------------------------------------------------------ */

/* In place: AMAX[b] (bits of the block maximum) becomes the scale's bits. */
__global__ void k_fp8_scales(unsigned *amax, uint64_t nb,
                             const uint8_t *prev_scales, uint8_t *scales) {
  CU_FOR(b, nb) {
    float sp = 0.0f;
    if (prev_scales != NULL)
      sp = __uint_as_float(gm_ld(prev_scales, b, 32));
    float s = gm_fp8_scale(__uint_as_float(amax[b]), prev_scales != NULL, sp);
    unsigned sb = __float_as_uint(s);
    amax[b] = sb;
    gm_st(scales, b, 32, sb);
  }
}

__global__ void k_fp8_values(const float *x, uint64_t n, uint64_t bs,
                             const unsigned *scale_bits, uint8_t *q) {
  CU_FOR(i, n) {
    q[i] = gm_fp8_elem(x[i], __uint_as_float(scale_bits[i / bs]));
  }
}

extern "C" int gpu_cu_quant_fp8(const uint8_t *master, uint64_t n,
                                uint32_t block, const uint8_t *prev_scales,
                                uint8_t *q, uint8_t *scales, stitch_diag *d) {
  CHECK_RC(check_master(master, n, d));
  uint64_t nb = stitch_view_fp8_nblocks(n, block);
  uint64_t bs = block == 0 ? (n ? n : 1) : block;
  const float *x = (const float *)master;
  unsigned *s = NULL;
  uint64_t bad = UINT64_MAX;
  int rc = 0;
  CU_GO(cudaMallocAsync((void **)&s, nb * sizeof(*s), 0));
  rc = block_amax(x, n, bs, nb, s, &bad, d);
  if (rc == 0 && bad != UINT64_MAX)
    rc = gpu_nonfinite_error(bad, d);
  if (rc != 0)
    goto out;
  k_fp8_scales<<<cu_blocks(nb), CU_THREADS>>>(s, nb, prev_scales, scales);
  CU_GO(cudaGetLastError());
  if (n > 0) {
    k_fp8_values<<<cu_blocks(n), CU_THREADS>>>(x, n, bs, s, q);
    CU_GO(cudaGetLastError());
  }
  CU_GO(cudaStreamSynchronize(0));
out:
  if (s != NULL)
    (void)cudaFreeAsync(s, 0);
  return rc;
}

/* ---- NVFP4 --------------------------------------------------------------- */

__global__ void k_nvfp4(const float *x, uint64_t nb, const uint8_t *prev_sb,
                        gm_s2 t, uint8_t *packed, uint8_t *sb) {
  CU_FOR(b, nb) {
    float v[16], m = 0.0f;
    for (int k = 0; k < 16; k++) {
      v[k] = x[16 * b + k];
      float a = fabsf(v[k]);
      m = a > m ? a : m;
    }
    uint8_t code = gm_nvfp4_code(m, prev_sb != NULL ? prev_sb[b] : 0, &t);
    sb[b] = code;
    float u = gm_mul(mf_e4m3_to_f32(code), t.s);
    for (int k = 0; k < 16; k += 2)
      packed[8 * b + k / 2] =
          (uint8_t)(gm_fp4_elem(v[k], u) | gm_fp4_elem(v[k + 1], u) << 4);
  }
}

extern "C" int gpu_cu_quant_nvfp4(const uint8_t *master, uint64_t n,
                                  const uint8_t *prev_sb,
                                  const uint8_t *prev_s2, uint8_t *packed,
                                  uint8_t *sb, uint8_t *s2, stitch_diag *d) {
  CHECK_RC(check_master(master, n, d));
  RETURN_IF(n % 16 != 0, d, STITCH_EINVAL,
            "quantize: nvfp4 needs a multiple of 16 elements, not %llu",
            (unsigned long long)n);
  const float *x = (const float *)master;
  int have_prev = prev_sb != NULL && prev_s2 != NULL;
  unsigned *amax = NULL, amax_host = 0;
  uint64_t bad = UINT64_MAX;
  float sp = 0.0f;
  gm_s2 t;
  int rc = 0;
  CU_GO(cudaMallocAsync((void **)&amax, sizeof(*amax), 0));
  rc = block_amax(x, n, n ? n : 1, 1, amax, &bad, d);
  if (rc == 0 && bad != UINT64_MAX)
    rc = gpu_nonfinite_error(bad, d);
  if (rc != 0)
    goto out;
  CU_GO(cudaMemcpy(&amax_host, amax, 4, cudaMemcpyDeviceToHost));
  if (have_prev)
    CU_GO(cudaMemcpy(&sp, prev_s2, 4, cudaMemcpyDeviceToHost));
  gpu_nvfp4_s2(mf_float(amax_host), have_prev, sp, &t);
  CU_GO(cudaMemcpy(s2, &t.s, 4, cudaMemcpyHostToDevice));
  if (n > 0) {
    k_nvfp4<<<cu_blocks(n / 16), CU_THREADS>>>(
        x, n / 16, have_prev ? prev_sb : NULL, t, packed, sb);
    CU_GO(cudaGetLastError());
  }
  CU_GO(cudaStreamSynchronize(0));
out:
  if (amax != NULL)
    (void)cudaFreeAsync(amax, 0);
  return rc;
}
