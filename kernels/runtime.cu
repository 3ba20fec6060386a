/* runtime.cu: device discovery and memory for the C side (dispatch.c). */
#include "cu_common.cuh"

extern "C" int gpu_cu_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError(); /* clear it: no device is not an error */
    return 0;
  }
  return n;
}

extern "C" int gpu_cu_malloc(void **p, uint64_t nbytes, stitch_diag *d) {
  CU_RET(cudaMalloc(p, nbytes ? nbytes : 1));
  return 0;
}

extern "C" void gpu_cu_free(void *p) { (void)cudaFree(p); }

extern "C" int gpu_cu_memcpy(void *dst, const void *src, uint64_t nbytes,
                             int kind, stitch_diag *d) {
  static const cudaMemcpyKind k[] = {cudaMemcpyHostToDevice,
                                     cudaMemcpyDeviceToHost,
                                     cudaMemcpyDeviceToDevice};
  if (nbytes == 0)
    return 0;
  CU_RET(cudaMemcpy(dst, src, nbytes, k[kind]));
  /* Device-to-device cudaMemcpy may return before the copy is done. */
  CU_RET(cudaDeviceSynchronize());
  return 0;
}

extern "C" int gpu_cu_memset(void *dev, int byte, uint64_t nbytes,
                             stitch_diag *d) {
  if (nbytes == 0)
    return 0;
  CU_RET(cudaMemset(dev, byte, nbytes));
  CU_RET(cudaDeviceSynchronize());
  return 0;
}

extern "C" int gpu_cu_device_name(char *buf, size_t len, stitch_diag *d) {
  int dev = 0;
  cudaDeviceProp prop;
  CU_RET(cudaGetDevice(&dev));
  CU_RET(cudaGetDeviceProperties(&prop, dev));
  if (len > 0) {
    strncpy(buf, prop.name, len - 1);
    buf[len - 1] = 0;
  }
  return 0;
}
