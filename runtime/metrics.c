/* metrics.c: what a run tells the user while it goes: metrics.jsonl (one JSON object a
 * line, flushed at once so `tail -f` and a crash both see every record; TensorBoard's
 * events file beside it, tboard.c), loss.svg (a self-contained plot, redrawn
 * atomically), and the progress line on a terminal. */
#include <errno.h>
#include <stdarg.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "rt.h"

/* ---- JSON numbers --------------------------------------------------------- */

const char *rt_json_num(char *buf, double v)
{
    /* JSON has no inf or nan; %.9g of a finite double is always a valid JSON number. */
    if (isfinite(v))
        snprintf(buf, 24, "%.9g", v);   /* at most 16 characters */
    else
        snprintf(buf, 24, "null");
    return buf;
}

/* ---- metrics.jsonl and the points of the plot ------------------------------ */

typedef struct pt { int64_t step; double v; } pt;

typedef struct series {
    pt *p;
    int64_t n, cap;
} series;

struct rt_metrics {
    char dir[RT_PATH_MAX];
    char path[RT_PATH_MAX + 16];   /* DIR/metrics.jsonl */
    FILE *f;
    off_t whole;                   /* the file's length up to its last whole record */
    series train, val;          /* a GAN's: d_loss and g_loss (rt_metrics_gan) */
    int gan;
    int64_t last_step;             /* the last step of the records kept on --resume (-1) */
    rt_tb *tb;
};

/* Keeps the steps increasing: a resumed run repeats the steps after its checkpoint,
 * and its points replace the old ones from there on. */
static void series_add(series *s, int64_t step, double v)
{
    while (s->n > 0 && s->p[s->n - 1].step >= step)
        s->n--;
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 1024;
        pt *p = realloc(s->p, (size_t)cap * sizeof *p);
        if (!p)
            rt_fail("out of memory keeping loss points for the plot");
        s->p = p;
        s->cap = cap;
    }
    s->p[s->n++] = (pt){step, v};
}

/* On --resume the plot must show the whole run, so the points of the existing file
 * are read back: train records carry "loss", validation records "val_loss". */
static void reload_points(rt_metrics *mt)
{
    FILE *f = fopen(mt->path, "r");
    if (!f)
        return;    /* a fresh folder */
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        cJSON *o = cJSON_Parse(line);
        if (!o)
            continue;   /* a torn last line from a crash */
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(o, "step");
        if (cJSON_IsNumber(step) && step->valuedouble > (double)mt->last_step)
            mt->last_step = (int64_t)step->valuedouble;
        const cJSON *loss = cJSON_GetObjectItemCaseSensitive(o, "loss");
        const cJSON *val = cJSON_GetObjectItemCaseSensitive(o, "val_loss");
        if (!loss && !val) {   /* a GAN's record: its two losses */
            loss = cJSON_GetObjectItemCaseSensitive(o, "d_loss");
            val = cJSON_GetObjectItemCaseSensitive(o, "g_loss");
        }
        int event = cJSON_GetObjectItemCaseSensitive(o, "event") != NULL;
        if (!event && cJSON_IsNumber(step)) {
            if (cJSON_IsNumber(loss))
                series_add(&mt->train, (int64_t)step->valuedouble, loss->valuedouble);
            if (cJSON_IsNumber(val))
                series_add(&mt->val, (int64_t)step->valuedouble, val->valuedouble);
        }
        cJSON_Delete(o);
    }
    free(line);
    fclose(f);
}

/* A file appended to on --resume must end with a whole record: one cut mid-line (by
 * hand, or a copy stopped short, when it is shorter than the checkpoint's length, which
 * the resume then keeps as it is) would otherwise get the start record glued to its
 * half line, and a reader of the file fail on that line. Cut back to the last newline. */
static void cut_torn_tail(rt_metrics *mt)
{
    int fd = fileno(mt->f);
    off_t end = mt->whole, at = end;
    char buf[4096];
    while (at > 0) {
        size_t n = at < (off_t)sizeof buf ? (size_t)at : sizeof buf;
        if (pread(fd, buf, n, at - (off_t)n) != (ssize_t)n)
            return;
        size_t i = n;
        while (i > 0 && buf[i - 1] != '\n')
            i--;
        if (i > 0) {
            at -= (off_t)(n - i);
            break;
        }
        at -= (off_t)n;
    }
    if (at == end)
        return;
    if (ftruncate(fd, at) != 0)
        rt_fail("%s: cannot cut its torn last line: %s", mt->path, strerror(errno));
    fprintf(stderr, "trainc: warning: %s ended in the middle of a line: cut back to its last "
            "whole record (%lld bytes dropped)\n", mt->path, (long long)(end - at));
    mt->whole = at;
}

void rt_metrics_file_check(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        rt_input_error("%s: not a regular file", path);
}

rt_metrics *rt_metrics_open(const char *dir, int append)
{
    rt_metrics *mt = calloc(1, sizeof *mt);
    if (!mt)
        rt_fail("out of memory");
    if (strlen(dir) >= sizeof mt->dir)
        rt_fail("%s: output folder name too long", dir);
    snprintf(mt->dir, sizeof mt->dir, "%s", dir);
    snprintf(mt->path, sizeof mt->path, "%s/metrics.jsonl", dir);
    mt->last_step = -1;
    if (rt_mkdir_p(dir) != 0)
        rt_input_error("%s: cannot create the output folder: %s", dir, strerror(errno));
    rt_metrics_file_check(mt->path);
    if (append)
        reload_points(mt);
    mt->f = fopen(mt->path, append ? "a+" : "w");   /* a+: cut_torn_tail reads */
    if (!mt->f)
        rt_input_error("%s: cannot open for writing: %s", mt->path, strerror(errno));
    struct stat st;
    mt->whole = fstat(fileno(mt->f), &st) == 0 ? st.st_size : 0;
    if (append)
        cut_torn_tail(mt);
    mt->tb = rt_tb_open(dir, mt->last_step + 1);
    return mt;
}

void rt_metrics_line(rt_metrics *mt, const char *json)
{
    if (!mt)
        return;
    if (fputs(json, mt->f) < 0 || fputc('\n', mt->f) == EOF || fflush(mt->f) != 0) {
        /* a full disk may have taken part of the record: cut it off, so that the file
         * ends with its last whole record */
        int e = errno;
        __fpurge(mt->f);   /* what the buffer still holds is not written at exit either */
        int cut = ftruncate(fileno(mt->f), mt->whole);
        (void)cut;
        rt_fail("%s: write failed: %s%s", mt->path, strerror(e), rt_full_hint(e));
    }
    mt->whole += (off_t)strlen(json) + 1;
    rt_tb_record(mt->tb, json);
}

void rt_metrics_sync(rt_metrics *mt)
{
    if (mt && (fflush(mt->f) != 0 || fsync(fileno(mt->f)) != 0))
        rt_fail("%s: write failed: %s", mt->path, strerror(errno));
}

void rt_metrics_train_point(rt_metrics *mt, int64_t step, double loss)
{
    if (mt)
        series_add(&mt->train, step, loss);
}

void rt_metrics_gan(rt_metrics *mt)
{
    if (mt)
        mt->gan = 1;
}

void rt_metrics_val_point(rt_metrics *mt, int64_t step, double val_loss)
{
    if (mt)
        series_add(&mt->val, step, val_loss);
}

void rt_metrics_close(rt_metrics *mt)
{
    if (!mt)
        return;
    if (fclose(mt->f) != 0)
        rt_fail("%s: write failed: %s", mt->path, strerror(errno));
    rt_tb_close(mt->tb);
    free(mt->train.p);
    free(mt->val.p);
    free(mt);
}

/* ---- loss.svg ---------------------------------------------------------------- */

/* Plot geometry, in SVG user units. */
enum { W = 720, H = 440, ML = 72, MR = 40, MT = 40, MB = 56 };
#define MAX_DRAWN 2000    /* points drawn per series: the file stays small */

typedef struct axis {
    double lo, hi, step;  /* lo and hi are multiples of step */
} axis;

/* 1, 2, 5 or 10 times a power of ten, near `raw`. */
static double nice_step(double raw)
{
    double mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

/* An axis covering [lo, hi] with about five ticks at nice numbers. `integral` keeps
 * the tick step at least 1 (steps are counts). */
static axis nice_axis(double lo, double hi, int integral)
{
    if (!(lo <= hi)) {
        lo = 0;
        hi = 1;
    }
    if (hi == lo) {   /* one point, or a flat line: give it room */
        double pad = integral ? 1 : (lo == 0 ? 1 : fabs(lo) * 0.1);
        lo -= pad;
        hi += pad;
    }
    double range = hi - lo;
    if (!isfinite(range) || range < fabs(hi) * 1e-12) {
        /* Extreme values: plot them unrounded rather than loop or divide by zero. */
        return (axis){lo, hi, isfinite(range) ? range / 4 : hi / 4 - lo / 4};
    }
    double step = nice_step(range / 4);
    if (integral && step < 1)
        step = 1;
    axis a = {floor(lo / step) * step, ceil(hi / step) * step, step};
    if (a.hi == a.lo)
        a.hi = a.lo + step;
    return a;
}

static double map(const axis *a, double v, double p0, double p1)
{
    /* Halves: hi - lo may overflow for losses near DBL_MAX. */
    return p0 + (v / 2 - a->lo / 2) / (a->hi / 2 - a->lo / 2) * (p1 - p0);
}

/* A tick label: no 1e-17 for zero, no 0.30000000000000004; steps in full (1000000,
 * not 1e+06). */
static void tick_label(char *buf, size_t cap, double v, double step, int integral)
{
    if (fabs(v) < step * 1e-9)
        v = 0;
    if (integral && fabs(v) < 1e15)
        snprintf(buf, cap, "%.0f", v);
    else
        snprintf(buf, cap, "%.6g", v);
}

static void sb_add(char **s, size_t *len, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void sb_add(char **s, size_t *len, size_t *cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        rt_fail("formatting loss.svg failed");
    if (*len + (size_t)n + 1 > *cap) {
        size_t c = *cap ? *cap : 8192;
        while (*len + (size_t)n + 1 > c)
            c *= 2;
        char *p = realloc(*s, c);
        if (!p)
            rt_fail("out of memory drawing loss.svg");
        *s = p;
        *cap = c;
    }
    va_start(ap, fmt);
    vsnprintf(*s + *len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    *len += (size_t)n;
}
/* An SVG being written, and where its plot area and axes are. */
typedef struct svg_buf {
    char *s;
    size_t len, cap;
} svg_buf;
typedef struct plot {
    axis ax, ay;
    int logy;                   /* y drawn at log10 of the value */
    double x0, x1, y0, y1;      /* the plot area; y grows downward */
} plot;
#define ADD(...) sb_add(&sv->s, &sv->len, &sv->cap, __VA_ARGS__)

/* Draws every stride-th point and always the last: index after i, or n at the end. */
static int64_t next_drawn(const series *s, int64_t i)
{
    int64_t stride = s->n > MAX_DRAWN ? (s->n + MAX_DRAWN - 1) / MAX_DRAWN : 1;
    if (i >= s->n - 1)
        return s->n;
    return i + stride < s->n ? i + stride : s->n - 1;
}
/* The drawn points of s whose values are finite. */
#define FOR_DRAWN(s, i) \
    for (int64_t i = 0; i < (s)->n; i = next_drawn(s, i)) \
        if (isfinite((s)->p[i].v))

static void range_of(const series *s, double *xlo, double *xhi, double *ylo, double *yhi)
{
    for (int64_t i = 0; i < s->n; i++) {
        double v = s->p[i].v, x = (double)s->p[i].step;
        if (!isfinite(v))
            continue;
        *xlo = fmin(*xlo, x);
        *xhi = fmax(*xhi, x);
        *ylo = fmin(*ylo, v);
        *yhi = fmax(*yhi, v);
    }
}

/* The SVG's head: its size, a white page and the title. */
static void svg_head(svg_buf *sv, const char *title)
{
    ADD("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
        "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
        "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n"
        "<text x=\"%d\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">%s</text>\n",
        W, H, W, H, W, H, W / 2, title);
}

/* The plot area's frame and the x axis's name under it. */
static void svg_frame(svg_buf *sv, const plot *pl, const char *xname)
{
    ADD("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
        "stroke=\"black\"/>\n"
        "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
        pl->x0, pl->y1, pl->x1 - pl->x0, pl->y0 - pl->y1, (pl->x0 + pl->x1) / 2, H - 14, xname);
}

/* The loss plot's axes over the finite points of both series. Log scale when the
 * losses span more than two decades (all positive): a y of v is drawn at log10(v),
 * with ticks at powers of ten (and 2 and 5 times them when few). */
static plot loss_axes(const rt_metrics *mt)
{
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    range_of(&mt->train, &xlo, &xhi, &ylo, &yhi);
    range_of(&mt->val, &xlo, &xhi, &ylo, &yhi);
    if (!(xlo <= xhi)) {    /* nothing finite yet */
        xlo = 0;
        xhi = 1;
        ylo = 0;
        yhi = 1;
    }
    plot pl = {.logy = ylo > 0 && yhi / ylo > 100, .x0 = ML, .x1 = W - MR, .y0 = H - MB, .y1 = MT};
    pl.ax = nice_axis(xlo, xhi, 1);
    if (pl.logy) {
        double lo = floor(log10(ylo)), hi = ceil(log10(yhi)), step = ceil((hi - lo) / 8);
        pl.ay = (axis){floor(lo / step) * step, ceil(hi / step) * step, step};
    } else
        pl.ay = nice_axis(ylo, yhi, 0);
    return pl;
}

static double plot_x(const plot *pl, int64_t step)
{
    return map(&pl->ax, (double)step, pl->x0, pl->x1);
}

static double plot_y(const plot *pl, double v)
{
    return map(&pl->ay, pl->logy ? log10(v) : v, pl->y0, pl->y1);
}

/* The loss plot's grid, ticks and labels. The loops count ticks rather than add steps,
 * so rounding cannot add or drop one; 40 bounds them whatever the axis. */
static void loss_ticks(svg_buf *sv, const plot *pl)
{
    const axis *ax = &pl->ax, *ay = &pl->ay;
    for (int i = 0; i <= 40; i++) {
        double v = ax->lo + i * ax->step;
        if (v > ax->hi + ax->step * 1e-9)
            break;
        double x = map(ax, v, pl->x0, pl->x1);
        char lab[32];
        tick_label(lab, sizeof lab, v, ax->step, 1);
        ADD("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>"
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>"
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
            x, pl->y0, x, pl->y1, x, pl->y0, x, pl->y0 + 5, x, pl->y0 + 19, lab);
    }
    /* y ticks at nice numbers; on a log scale at powers of ten, and 2 and 5 times them
     * when the axis spans at most three decades */
    static const double mult[] = {1, 2, 5};
    const int nm = pl->logy && ay->step == 1 && ay->hi - ay->lo <= 3 ? 3 : 1;
    for (int i = 0; i <= 40; i++) {
        double base = ay->lo + i * ay->step;
        if (base > ay->hi + ay->step * 1e-9)
            break;
        for (int k = 0; k < nm; k++) {
            double v = pl->logy ? base + log10(mult[k]) : base;
            if (v > ay->hi + ay->step * 1e-9)
                break;
            char lab[32];
            if (pl->logy)
                snprintf(lab, sizeof lab, "%g", mult[k] * pow(10, base));
            else
                tick_label(lab, sizeof lab, v, ay->step, 0);
            double y = map(ay, v, pl->y0, pl->y1);
            ADD("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>"
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                pl->x0, y, pl->x1, y, pl->x0 - 5, y, pl->x0, y, pl->x0 - 8, y + 4, lab);
        }
    }
}

/* A series as a line in colour c; a lone point gets a dot so it shows (dot: its
 * radius), and with marks every point gets a marker. */
static void loss_line(svg_buf *sv, const plot *pl, const series *s, const char *c, int marks)
{
    ADD("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", c);
    int64_t drawn = 0;
    double lx = 0, ly = 0;
    FOR_DRAWN(s, i) {
        lx = plot_x(pl, s->p[i].step);
        ly = plot_y(pl, s->p[i].v);
        ADD("%s%.1f,%.1f", drawn++ ? " " : "", lx, ly);
    }
    ADD("\"/>\n");
    if (marks) {
        ADD("<g fill=\"%s\">", c);
        FOR_DRAWN(s, i)
            ADD("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\"/>", plot_x(pl, s->p[i].step),
                plot_y(pl, s->p[i].v));
        ADD("</g>\n");
    } else if (drawn == 1)
        ADD("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2\" fill=\"%s\"/>\n", lx, ly, c);
}

/* The legend, top right inside the plot, and the SVG's end. */
static void loss_legend(svg_buf *sv, const plot *pl, const char *tc, const char *vc, int gan)
{
    double lgx = pl->x1 - 130, lgy = pl->y1 + 10;
    ADD("<rect x=\"%.1f\" y=\"%.1f\" width=\"120\" height=\"44\" fill=\"white\" "
        "stroke=\"#888\"/>\n"
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\"/>"
        "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n"
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\"/>"
        "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>"
        "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n</svg>\n",
        lgx, lgy, lgx + 8, lgy + 14, lgx + 32, lgy + 14, tc, lgx + 40, lgy + 18,
        gan ? "d_loss" : "train", lgx + 8, lgy + 32, lgx + 32, lgy + 32, vc, lgx + 20,
        lgy + 32, vc, lgx + 40, lgy + 36, gan ? "g_loss" : "validation");
}

/* loss.svg: the training loss as a line, the validation loss as a line with markers
 * (a GAN's d_loss and g_loss in their places). */
static char *draw_svg(const rt_metrics *mt, size_t *out_len)
{
    svg_buf b = {0}, *sv = &b;
    const plot pl = loss_axes(mt);
    const char *tc = "#1f77b4", *vc = "#ff7f0e";
    svg_head(sv, pl.logy ? "loss (log scale)" : "loss");
    loss_ticks(sv, &pl);
    svg_frame(sv, &pl, "step");
    loss_line(sv, &pl, &mt->train, tc, 0);
    loss_line(sv, &pl, &mt->val, vc, 1);
    loss_legend(sv, &pl, tc, vc, mt->gan);
    *out_len = b.len;
    return b.s;
}

/* Writes an SVG (temporary name, renamed); the plots are a convenience: a failure is
 * reported, never fatal. */
static void write_svg(const char *path, const char *svg, size_t n)
{
    FILE *f = rt_tmp_open(path);
    if (f)
        fwrite(svg, 1, n, f);   /* a short write sets the error rt_tmp_commit reads */
    if (!f || rt_tmp_commit(f, path) != 0)
        fprintf(stderr, "trainc: warning: %s: cannot write: %s\n", path, strerror(errno));
}

void rt_metrics_plot(rt_metrics *mt)
{
    if (!mt)
        return;
    size_t n;
    char *svg = draw_svg(mt, &n);
    char path[RT_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/loss.svg", mt->dir);
    write_svg(path, svg, n);
    free(svg);
}

/* The range test's axes: x the log10 of the rate, ticks at whole decades. */
static plot lr_axes(const double *lr, const double *loss, int64_t n)
{
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (lr[i] > 0 && isfinite(loss[i])) {
            xlo = fmin(xlo, log10(lr[i]));
            xhi = fmax(xhi, log10(lr[i]));
            ylo = fmin(ylo, loss[i]);
            yhi = fmax(yhi, loss[i]);
        }
    if (!(xlo <= xhi)) {
        xlo = -8;
        xhi = 0;
        ylo = 0;
        yhi = 1;
    }
    plot pl = {.ax = {floor(xlo), ceil(xhi), 1}, .ay = nice_axis(ylo, yhi, 0),
               .x0 = ML, .x1 = W - MR, .y0 = H - MB, .y1 = MT};
    if (pl.ax.hi == pl.ax.lo)
        pl.ax.hi = pl.ax.lo + 1;
    if (pl.ax.hi - pl.ax.lo > 12)
        pl.ax.step = ceil((pl.ax.hi - pl.ax.lo) / 12);
    return pl;
}

/* The range test's grid and labels: decades on x, nice numbers on y. */
static void lr_ticks(svg_buf *sv, const plot *pl)
{
    const axis *ax = &pl->ax, *ay = &pl->ay;
    for (int i = 0; i <= 40; i++) {
        double v = ax->lo + i * ax->step;
        if (v > ax->hi + 1e-9)
            break;
        double x = map(ax, v, pl->x0, pl->x1);
        ADD("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>"
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">1e%g</text>\n",
            x, pl->y0, x, pl->y1, x, pl->y0 + 19, v);
    }
    for (int i = 0; i <= 40; i++) {
        double v = ay->lo + i * ay->step;
        if (v > ay->hi + ay->step * 1e-9)
            break;
        char lab[32];
        tick_label(lab, sizeof lab, v, ay->step, 0);
        double y = map(ay, v, pl->y0, pl->y1);
        ADD("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>"
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
            pl->x0, y, pl->x1, y, pl->x0 - 8, y + 4, lab);
    }
}

void rt_plot_lr_find(const char *dir, const double *lr, const double *loss, int64_t n,
                     double suggested)
{
    svg_buf b = {0}, *sv = &b;
    const plot pl = lr_axes(lr, loss, n);
    const char *tc = "#1f77b4", *sc = "#d62728";
    svg_head(sv, "learning-rate range test: smoothed loss");
    lr_ticks(sv, &pl);
    svg_frame(sv, &pl, "learning rate (log scale)");
    ADD("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", tc);
    int drawn = 0;
    for (int64_t i = 0; i < n; i++)
        if (lr[i] > 0 && isfinite(loss[i]))
            ADD("%s%.1f,%.1f", drawn++ ? " " : "", map(&pl.ax, log10(lr[i]), pl.x0, pl.x1),
                map(&pl.ay, loss[i], pl.y0, pl.y1));
    ADD("\"/>\n");
    if (suggested > 0 && isfinite(suggested)) {
        double x = map(&pl.ax, log10(suggested), pl.x0, pl.x1);
        ADD("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
            "stroke-dasharray=\"6 4\"/><text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">suggested %.3g</text>\n",
            x, pl.y0, x, pl.y1, sc, x + 6, pl.y1 + 16, sc, suggested);
    }
    ADD("</svg>\n");
    char path[RT_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/lr_find.svg", dir);
    write_svg(path, b.s, b.len);
    free(b.s);
}

/* ---- the progress line ---------------------------------------------------------- */

/* One line on a terminal, redrawn at most ten times a second. The rate for the ETA
 * is measured from the first call, so a resumed run (whose step does not start at 0)
 * gets an honest estimate. */
static struct {
    int showing;
    int have_base;
    int64_t base_step;
    double base_elapsed;
    double last_draw;
    int pending;          /* the last call was not drawn: rt_progress_done draws it */
    int64_t step, total, epoch;
    double loss, rate, elapsed;
} prog;

static void fmt_duration(char *buf, size_t cap, double s)
{
    long t = (long)(s + 0.5);
    if (t < 60)
        snprintf(buf, cap, "%lds", t);
    else if (t < 3600)
        snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
}

static void draw_progress(void)
{
    char line[256];
    size_t n = 0;
#define PUT(...) \
    (n += (size_t)snprintf(line + n, n < sizeof line ? sizeof line - n : 0, __VA_ARGS__))
    PUT("\rstep %lld", (long long)prog.step);
    if (prog.total > 0)
        PUT("/%lld", (long long)prog.total);
    PUT("  epoch %lld", (long long)prog.epoch);
    if (isfinite(prog.loss))
        PUT(fabs(prog.loss) < 1000 ? "  loss %.4f" : "  loss %.4g", prog.loss);
    else
        PUT("  loss %s", isnan(prog.loss) ? "nan" : "inf");
    if (isfinite(prog.rate) && prog.rate > 0)
        PUT("  %.3g samples/s", prog.rate);
    double dt = prog.elapsed - prog.base_elapsed;
    int64_t ds = prog.step - prog.base_step;
    if (prog.total > 0 && ds > 0 && dt > 0 && prog.step <= prog.total) {
        char eta[32];
        fmt_duration(eta, sizeof eta, dt / (double)ds * (double)(prog.total - prog.step));
        PUT("  ETA %s", eta);
    }
    PUT("\033[K");
#undef PUT
    if (n >= sizeof line)
        n = sizeof line - 1;
    /* stderr is unbuffered: one fwrite is one write(2), so the line never tears. */
    if (fwrite(line, 1, n, stderr) == n)
        prog.showing = 1;
    prog.pending = 0;
}

void rt_progress(int quiet, int64_t step, int64_t total_steps, int64_t epoch, double loss,
                 double samples_per_s, double elapsed_s)
{
    if (quiet || !isatty(2))
        return;
    if (!prog.have_base) {
        prog.have_base = 1;
        prog.base_step = step;
        prog.base_elapsed = elapsed_s;
    }
    prog.step = step;
    prog.total = total_steps;
    prog.epoch = epoch;
    prog.loss = loss;
    prog.rate = samples_per_s;
    prog.elapsed = elapsed_s;
    double now = rt_now();
    if (prog.showing && now - prog.last_draw < 0.1 && step != total_steps) {
        prog.pending = 1;
        return;
    }
    prog.last_draw = now;
    draw_progress();
}

void rt_progress_done(int quiet)
{
    if (!quiet && prog.pending && isatty(2))
        draw_progress();
    if (prog.showing)
        fputc('\n', stderr);
    memset(&prog, 0, sizeof prog);
}
