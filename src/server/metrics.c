/* metrics.c - GET /metrics in the Prometheus text format (version 0.0.4): token counters,
 * requests by outcome, TTFT and inter-token histograms, slots and queue, HTTP responses by
 * class, and the expert residency counters of the engine's statistics. */
#define _GNU_SOURCE
#include "server.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { char *s; size_t n, cap; } out_buf;

static void outf(out_buf *b, const char *fmt, ...) HM_PRINTF(2, 3);
static void outf(out_buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap; va_start(ap, fmt);
        int k = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < b->cap - b->n) { b->n += (size_t)k; return; }
        b->cap = b->cap * 2 + (size_t)(k > 0 ? k : 0) + 256;
        b->s = realloc(b->s, b->cap);
        if (!b->s) abort();
    }
}

static void metric(out_buf *b, const char *name, const char *type, const char *help) {
    outf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void hist(out_buf *b, const char *name, const char *help, const engine_hist *h) {
    metric(b, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < ENGINE_HIST_N; i++) {
        cum += h->bucket[i];
        outf(b, "%s_bucket{le=\"%g\"} %llu\n", name, engine_hist_bounds[i], (unsigned long long)cum);
    }
    cum += h->bucket[ENGINE_HIST_N];
    outf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)cum, name, h->sum, name,
         (unsigned long long)h->count);
}

void api_metrics(http_req *h) {
    server *s = h->s;
    engine_stats st;
    memset(&st, 0, sizeof st);
    if (server_ready(s) && s->en) engine_stats_get(s->en, &st);
    out_buf b = { hm_malloc(4096), 0, 4096 };
    b.s[0] = 0;
    metric(&b, "hotmoe_ready", "gauge", "1 when the model is loaded and the server accepts generations");
    outf(&b, "hotmoe_ready %d\n", server_ready(s) && !server_stopping(s));
    metric(&b, "hotmoe_prompt_tokens_total", "counter", "Prompt tokens processed");
    outf(&b, "hotmoe_prompt_tokens_total %llu\n", (unsigned long long)st.prompt_tokens);
    metric(&b, "hotmoe_generated_tokens_total", "counter", "Tokens generated");
    outf(&b, "hotmoe_generated_tokens_total %llu\n", (unsigned long long)st.gen_tokens);
    metric(&b, "hotmoe_requests_total", "counter", "Generation requests by outcome");
    static const char *outcome[ENGINE_OUT_COUNT] = { "ok", "cancelled", "timeout", "rejected" };
    for (int i = 0; i < ENGINE_OUT_COUNT; i++) outf(&b, "hotmoe_requests_total{outcome=\"%s\"} %llu\n", outcome[i], (unsigned long long)st.requests[i]);
    metric(&b, "hotmoe_http_responses_total", "counter", "HTTP responses by status class");
    pthread_mutex_lock(&s->mu);
    for (int k = 1; k <= 5; k++) outf(&b, "hotmoe_http_responses_total{code=\"%dxx\"} %llu\n", k, (unsigned long long)s->http_by_status[k]);
    pthread_mutex_unlock(&s->mu);
    hist(&b, "hotmoe_time_to_first_token_seconds", "Time from request arrival to its first generated token", &st.ttft);
    hist(&b, "hotmoe_inter_token_latency_seconds", "Time between consecutive generated tokens of one request", &st.itl);
    metric(&b, "hotmoe_slots_busy", "gauge", "Slots generating now");
    outf(&b, "hotmoe_slots_busy %d\n", st.slots_busy);
    metric(&b, "hotmoe_slots_total", "gauge", "Slots (--parallel)");
    outf(&b, "hotmoe_slots_total %d\n", st.n_slots);
    metric(&b, "hotmoe_queue_length", "gauge", "Requests waiting for a slot");
    outf(&b, "hotmoe_queue_length %d\n", st.queue_len);
    metric(&b, "hotmoe_decode_steps_total", "counter", "Engine steps (one batch each)");
    outf(&b, "hotmoe_decode_steps_total %llu\n", (unsigned long long)st.steps);
    metric(&b, "hotmoe_chain_tokens_total", "counter", "Generated tokens whose steps ran chained on the GPU (greedy, one request decoding)");
    outf(&b, "hotmoe_chain_tokens_total %llu\n", (unsigned long long)st.chain_tokens);
    metric(&b, "hotmoe_expert_cache_hits_total", "counter", "Routed experts found resident on the GPU");
    outf(&b, "hotmoe_expert_cache_hits_total %llu\n", (unsigned long long)st.expert_hits);
    metric(&b, "hotmoe_expert_cache_misses_total", "counter", "Routed experts not resident on the GPU");
    outf(&b, "hotmoe_expert_cache_misses_total %llu\n", (unsigned long long)st.expert_misses);
    metric(&b, "hotmoe_expert_swaps_total", "counter", "Experts moved between host and GPU by the exchange policy");
    outf(&b, "hotmoe_expert_swaps_total %llu\n", (unsigned long long)st.expert_swaps);
    metric(&b, "hotmoe_pcie_bytes_total", "counter", "Bytes copied host to GPU for experts");
    outf(&b, "hotmoe_pcie_bytes_total %llu\n", (unsigned long long)st.pcie_bytes);
    metric(&b, "hotmoe_expert_cpu_share", "gauge", "Share of routed experts computed on the CPU (0..1)");
    outf(&b, "hotmoe_expert_cpu_share %g\n", st.expert_cpu_share);
    metric(&b, "hotmoe_uptime_seconds", "gauge", "Seconds since the server started");
    outf(&b, "hotmoe_uptime_seconds %.3f\n", hm_now() - s->started);
    http_send_text(h, 200, "text/plain; version=0.0.4; charset=utf-8", b.s, b.n);
    free(b.s);
}
