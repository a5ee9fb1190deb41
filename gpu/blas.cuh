/* blas.cuh - cuBLAS loaded at the first prefill (dlopen) instead of linked.
 *
 * Why: libcublasLt carries ~94 KB of static thread-local storage. Linked at load time, that TLS
 * sits at the top of every thread's stack, and civetweb creates its worker threads with a small
 * fixed stack: pthread_create fails (EINVAL) and `serve` could not start in the CUDA build, not
 * even with --device cpu. Loaded with dlopen, the library's TLS is allocated per thread on first
 * use instead. Only the batched prefill uses cuBLAS (dense projections as F16 GEMMs). */
#ifndef HM_BLAS_CUH
#define HM_BLAS_CUH
#include <cublas_v2.h>
#include <stddef.h>

typedef struct {
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *, const void *,
                              cudaDataType, int, const void *, cudaDataType, int, const void *, void *, cudaDataType, int,
                              cublasComputeType_t, cublasGemmAlgo_t);   /* the C entry point (C++ adds an overload) */
    decltype(&cublasSgemm_v2) sgemm;
    decltype(&cublasGetStatusString) status_string;
} hm_blas;

/* The loaded library's entry points (loaded once; later calls return the same table). NULL, with
 * err naming the library and dlerror()'s reason, when cuBLAS cannot be loaded. */
const hm_blas *hm_blas_get(char *err, size_t errlen);
#endif
