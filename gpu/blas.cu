/* blas.cu - cuBLAS through dlopen (see blas.cuh for why). */
#include "blas.cuh"
#include <dlfcn.h>
#include <mutex>
#include <stdio.h>

#ifndef HM_CUBLAS_DIR
#define HM_CUBLAS_DIR ""
#endif

static hm_blas g_blas;
static int g_state;   /* 0: not tried, 1: loaded, -1: failed */
static char g_why[512];
static std::mutex g_mu;

template <class T>
static int sym(void *h, const char *name, T *out) {
    *out = (T)dlsym(h, name);
    if (!*out) snprintf(g_why, sizeof g_why, "cuBLAS: symbol %s not found in the loaded library", name);
    return *out ? 0 : -1;
}

const hm_blas *hm_blas_get(char *err, size_t errlen) {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_state) {
        char dir_lib[1024];
        snprintf(dir_lib, sizeof dir_lib, "%s/libcublas.so.%d", HM_CUBLAS_DIR, CUBLAS_VER_MAJOR);
        char so[64];
        snprintf(so, sizeof so, "libcublas.so.%d", CUBLAS_VER_MAJOR);
        const char *names[] = { so, dir_lib, "libcublas.so" };
        void *h = NULL;
        for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++)
            if (names[i][0] != '/' || HM_CUBLAS_DIR[0]) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *d = dlerror();
            snprintf(g_why, sizeof g_why, "cannot load cuBLAS (%s, needed by the batched prefill): %s", so, d ? d : "not found");
            g_state = -1;
        } else if (sym(h, "cublasCreate_v2", &g_blas.create) || sym(h, "cublasDestroy_v2", &g_blas.destroy) ||
                   sym(h, "cublasSetStream_v2", &g_blas.set_stream) || sym(h, "cublasGemmEx", &g_blas.gemm_ex) ||
                   sym(h, "cublasSgemm_v2", &g_blas.sgemm) || sym(h, "cublasGetStatusString", &g_blas.status_string))
            g_state = -1;
        else
            g_state = 1;
    }
    if (g_state < 0) {
        if (err && errlen) snprintf(err, errlen, "gpu prefill: %s", g_why);
        return NULL;
    }
    return &g_blas;
}
