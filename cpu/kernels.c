/* kernels.c - CPU reference kernels: exact dequantization, F32 accumulation. */
#include "cpu.h"
#include "gemv.h"
#include "quant.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void cpu_tensor_row(const hm_tensor *t, int64_t row, float *out) {
    size_t rs = hm_row_size(t->type, t->ne[0]);
    const uint8_t *p = (const uint8_t *)t->data + (size_t)row * rs;
    hm_type_get(t->type)->to_float(p, out, t->ne[0]);
}

static float dot_f32(const float *a, const float *b, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

int (*cpu_matvec_hook)(float *y, const hm_tensor *W, const float *x);

void cpu_matvec(float *y, const hm_tensor *W, const float *x) {
    if (cpu_matvec_hook && cpu_matvec_hook(y, W, x) == 0) return;
    /* fast kernels (gemv.c) unless `--kernels ref` or the type has none; below is the reference */
    if (hm_kernels_get() == HM_KERNELS_FAST && hm_gemv(y, W, x) == 0) return;
    int64_t n = W->ne[0], rows = W->ne[1];
    if (W->type == 0 /* F32 */) {
        const float *w = W->data;
#pragma omp parallel for schedule(static) if (rows * n > 32768)
        for (int64_t r = 0; r < rows; r++) y[r] = dot_f32(w + r * n, x, n);
        return;
    }
#pragma omp parallel if (rows * n > 32768)
    {
        float *buf = malloc(sizeof(float) * (size_t)n);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            cpu_tensor_row(W, r, buf);
            y[r] = dot_f32(buf, x, n);
        }
        free(buf);
    }
}

void cpu_rmsnorm(float *out, const float *x, const hm_tensor *w, int n, float eps) {
    float ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    float *wf = malloc(sizeof(float) * (size_t)n);
    cpu_tensor_row(w, 0, wf);
    for (int i = 0; i < n; i++) out[i] = wf[i] * (x[i] * inv);
    free(wf);
}

void cpu_rope_neox(float *v, int n_heads, int head_dim, int n_rot, int pos, float theta) {
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        /* as HF: inv_freq in f32 from theta^(2i/n_rot), angle = pos * inv_freq in f32 */
        float inv = 1.0f / powf(theta, (float)(2 * i) / (float)n_rot);
        float ang = (float)pos * inv, c = cosf(ang), s = sinf(ang);
        for (int h = 0; h < n_heads; h++) {
            float *p = v + h * head_dim;
            float a = p[i], b = p[i + half];
            p[i] = a * c - b * s;
            p[i + half] = b * c + a * s;
        }
    }
}

void cpu_softmax(float *x, int n) {
    float mx = x[0], sum = 0;
    for (int i = 1; i < n; i++) if (x[i] > mx) mx = x[i];
    for (int i = 0; i < n; i++) { x[i] = expf(x[i] - mx); sum += x[i]; }
    for (int i = 0; i < n; i++) x[i] /= sum;
}

void cpu_add_bias(float *y, const hm_tensor *b, int n) {
    float *bf = malloc(sizeof(float) * (size_t)n);
    cpu_tensor_row(b, 0, bf);
    for (int i = 0; i < n; i++) y[i] += bf[i];
    free(bf);
}

void cpu_ffn(float *out, const hm_ffn_w *f, const float *x, float *hb, float *hb2) {
    int64_t n = f->gate.ne[1];
    cpu_matvec(hb, &f->gate, x);
    cpu_matvec(hb2, &f->up, x);
    for (int64_t i = 0; i < n; i++) hb[i] = hb[i] / (1.0f + expf(-hb[i])) * hb2[i];
    cpu_matvec(out, &f->down, hb);
}
