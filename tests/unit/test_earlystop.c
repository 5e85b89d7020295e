/* Early stopping against PyTorch Lightning's rules (runtime/earlystop.c): sequences
 * of monitored values, including NaN, infinities, ties and both modes, and the check
 * at which the run stops, with the kind of stop. Expected values worked out by hand
 * from Lightning's _evaluate_stopping_criteria (on float32 tensors). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "rt_loop.h"

typedef struct {
    const char *name;
    int mode;
    int64_t patience;
    double min_delta, stop_thr, div_thr;
    int check_finite;
    double v[8];
    int n;
    int stop_at;   /* 1-based check that stops, 0 = never */
    int kind;      /* RT_ES_PATIENCE, RT_ES_STOP (a threshold) or RT_ES_DIVERGED */
} Case;

#define MIN RT_MODE_MIN
#define MAX RT_MODE_MAX
#define NONE NAN

static const Case cases[] = {
    {"min: stops after patience checks", MIN, 3, 0, NONE, NONE, 1, {1.0, 0.9, 0.95, 0.95, 0.91}, 5, 5, RT_ES_PATIENCE},
    {"min: a tie is not an improvement", MIN, 2, 0, NONE, NONE, 1, {1, 1, 1}, 3, 3, RT_ES_PATIENCE},
    {"min: improvement resets the count", MIN, 2, 0, NONE, NONE, 1, {1, 1.1, 0.9, 1.0, 0.8, 0.85}, 6, 0, 0},
    {"min_delta: must be exceeded", MIN, 1, 0.5, NONE, NONE, 1, {1.0, 0.5}, 2, 2, RT_ES_PATIENCE},
    {"min_delta: exceeded", MIN, 1, 0.5, NONE, NONE, 1, {1.0, 0.25}, 2, 0, 0},
    {"min_delta: small gains accumulate no credit", MIN, 2, 0.1, NONE, NONE, 1, {1.0, 0.95, 0.91, 0.8}, 4, 3, RT_ES_PATIENCE},
    {"max: val_acc", MAX, 2, 0, NONE, NONE, 1, {0.5, 0.6, 0.6, 0.55}, 4, 4, RT_ES_PATIENCE},
    {"max: min_delta", MAX, 1, 0.05, NONE, NONE, 1, {0.5, 0.55}, 2, 2, RT_ES_PATIENCE},
    {"NaN with check_finite", MIN, 3, 0, NONE, NONE, 1, {1.0, NAN}, 2, 2, RT_ES_DIVERGED},
    {"NaN without check_finite counts as no improvement", MIN, 2, 0, NONE, NONE, 0, {1.0, NAN, NAN}, 3, 3, RT_ES_PATIENCE},
    {"+inf with check_finite", MIN, 3, 0, NONE, NONE, 1, {INFINITY}, 1, 1, RT_ES_DIVERGED},
    {"-inf with check_finite (mode max)", MAX, 3, 0, NONE, NONE, 1, {0.3, -INFINITY}, 2, 2, RT_ES_DIVERGED},
    {"-inf without check_finite improves a min", MIN, 1, 0, NONE, NONE, 0, {1.0, -INFINITY, 0.5}, 3, 3, RT_ES_PATIENCE},
    {"+inf first value without check_finite: no improvement on +inf", MIN, 1, 0, NONE, NONE, 0, {INFINITY, 2.0}, 2, 1, RT_ES_PATIENCE},
    {"stopping_threshold (min) is strict", MIN, 9, 0, 0.5, NONE, 1, {1.0, 0.6, 0.5, 0.4}, 4, 4, RT_ES_STOP},
    {"stopping_threshold (max)", MAX, 9, 0, 0.9, NONE, 1, {0.8, 0.91}, 2, 2, RT_ES_STOP},
    {"divergence_threshold (min)", MIN, 9, 0, NONE, 5.0, 1, {1, 2, 6}, 3, 3, RT_ES_STOP},
    {"divergence_threshold equal is not beyond", MIN, 9, 0, NONE, 5.0, 1, {1, 5, 5.5}, 3, 3, RT_ES_STOP},
    {"divergence_threshold (max)", MAX, 9, 0, NONE, 0.2, 1, {0.5, 0.3, 0.1}, 3, 3, RT_ES_STOP},
    {"thresholds checked before improvement", MIN, 9, 0, 0.5, NONE, 1, {0.4}, 1, 1, RT_ES_STOP},
    {"patience 0 stops at the first non-improvement", MIN, 0, 0, NONE, NONE, 1, {1.0, 1.1}, 2, 2, RT_ES_PATIENCE},
    {"never stops while improving", MIN, 1, 0, NONE, NONE, 1, {5, 4, 3, 2, 1, 0, -1, -2}, 8, 0, 0},
    /* Lightning's tensors are float32: 0.7 + 0.1 is 0.8000000119f, not below 0.8f (in
     * double it is 0.7999999999999999, below 0.8) */
    {"float32 arithmetic: 0.7 + min_delta 0.1 is not below 0.8", MIN, 1, 0.1, NONE, NONE, 1, {0.8, 0.7}, 2, 2, RT_ES_PATIENCE},
    {"float32: a value past FLT_MAX is infinite", MIN, 3, 0, NONE, NONE, 1, {1.0, 1e39}, 2, 2, RT_ES_DIVERGED},
};

/* min_epochs / min_steps: patience may end the run only once both are reached
 * (whole epochs done, optimizer steps done); null (-1) and 0 ask for nothing */
static int check_min_reached(void)
{
    static const struct { int64_t min_e, min_s, epochs, steps; int want; } t[] = {
        {-1, -1, 0, 1, 1}, {0, 0, 0, 1, 1}, {2, -1, 1, 50, 0}, {2, -1, 2, 50, 1},
        {-1, 30, 5, 29, 0}, {-1, 30, 0, 30, 1}, {1, 30, 0, 30, 0}, {1, 30, 1, 29, 0},
        {1, 30, 1, 30, 1},
    };
    int fails = 0;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        rt_train_config c;
        rt_config_defaults(&c);
        c.min_epochs = t[i].min_e;
        c.min_steps = t[i].min_s;
        int got = rt_es_min_reached(&c, t[i].epochs, t[i].steps);
        if (got != t[i].want) {
            printf("FAIL min_reached(min_epochs %lld, min_steps %lld; epochs %lld, steps %lld) "
                   "= %d\n", (long long)t[i].min_e, (long long)t[i].min_s,
                   (long long)t[i].epochs, (long long)t[i].steps, got);
            fails++;
        }
    }
    printf("%s min_epochs/min_steps: %zu cases\n", fails ? "FAIL" : "ok  ", sizeof t / sizeof t[0]);
    return fails;
}

int main(void)
{
    int fails = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const Case *k = &cases[i];
        rt_train_config c;
        rt_config_defaults(&c);
        c.has_early_stopping = 1;
        c.es_mode = k->mode;
        c.es_patience = k->patience;
        c.es_min_delta = k->min_delta;
        c.es_stopping_threshold = k->stop_thr;
        c.es_divergence_threshold = k->div_thr;
        c.es_check_finite = k->check_finite;
        rt_stopper s;
        rt_es_init(&s, &c);
        int stop_at = 0, kind = 0;
        char why[256];
        for (int j = 0; j < k->n && !stop_at; j++) {
            int r = rt_es_check(&c, &s, k->v[j], why, sizeof why);
            if (r != RT_ES_GO_ON) {
                stop_at = j + 1;
                kind = r;
            }
        }
        int ok = stop_at == k->stop_at && (!stop_at || kind == k->kind);
        printf("%s %s (stops at %d, want %d)\n", ok ? "ok  " : "FAIL", k->name, stop_at, k->stop_at);
        fails += !ok;
    }
    fails += check_min_reached();
    printf("earlystop: %d failed\n", fails);
    return fails != 0;
}
