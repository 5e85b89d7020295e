/* image_read.c: images read as Pillow reads them, for `trainc data images`: PNG (8-bit
 * and lower depths, not interlaced: zlib's inflate, the five row filters) and JPEG
 * (libjpeg, its defaults: the islow DCT, fancy upsampling, as Pillow decodes without
 * draft mode), converted to L or RGB as Image.convert does (L from RGB: ITU-R 601-2
 * luma in Pillow's fixed point; alpha dropped; a palette looked up), resized as
 * Image.resize(size, resample) does for 8-bit bands (Pillow's Resample.c: its filters
 * widened by the scale when shrinking, coefficients in 22-bit fixed point, the
 * horizontal pass, then the vertical one) and cropped at the centre as transformers'
 * center_crop does, so that the pixels are those an image processor makes of the file
 * (hf_image_proc.c says which). */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>
#include <zlib.h>
#include "cmd.h"

/* The largest image read: 2^26 pixels (8192 x 8192), 192 MiB as RGB; past it a header
 * could ask for any amount of memory */
#define IMAGE_MAX_PIXELS ((uint64_t)1 << 26)

/* ---- PNG ---------------------------------------------------------------------------- */

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int paeth(int a, int b, int c)
{
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/* Rows of `stride` bytes (each after its filter byte) unfiltered in place into out; bpp
 * the bytes a pixel takes (at least 1) */
static int png_unfilter(const unsigned char *in, unsigned char *out, uint32_t h, size_t stride,
                        int bpp)
{
    for (uint32_t y = 0; y < h; y++) {
        const unsigned char *src = in + y * (stride + 1) + 1;
        unsigned char *row = out + y * stride, *up = y ? row - stride : NULL;
        int f = src[-1];
        for (size_t x = 0; x < stride; x++) {
            int a = x >= (size_t)bpp ? row[x - bpp] : 0, b = up ? up[x] : 0,
                c = up && x >= (size_t)bpp ? up[x - bpp] : 0;
            int v = f == 0 ? 0 : f == 1 ? a : f == 2 ? b : f == 3 ? (a + b) / 2 : f == 4 ? paeth(a, b, c) : -1;
            if (v < 0)
                return -1;
            row[x] = (unsigned char)(src[x] + v);
        }
    }
    return 0;
}

/* Sample x of a row of depth-bit samples (depth < 8 packed from the high bits) */
static int png_sample(const unsigned char *row, uint32_t x, int depth)
{
    if (depth == 8)
        return row[x];
    int per = 8 / depth, shift = 8 - depth * (int)(x % (uint32_t)per + 1);
    return row[x / (uint32_t)per] >> shift & ((1 << depth) - 1);
}

typedef struct Png {
    uint32_t w, h;
    int depth, color, interlace;
    unsigned char pal[256][3];
    int n_pal;
    unsigned char *idat;
    size_t n_idat, cap_idat;
} Png;

/* The chunks: IHDR, PLTE, the IDATs gathered; 0, or the reason it cannot be read */
static const char *png_chunks(const unsigned char *d, size_t n, Png *p)
{
    size_t at = 8;
    int ihdr = 0;
    while (at + 12 <= n) {
        uint32_t len = be32(d + at);
        const unsigned char *type = d + at + 4, *body = d + at + 8;
        if (len > n - at - 12)
            return "a chunk runs past the end of the file";
        if (!memcmp(type, "IHDR", 4) && len >= 13) {
            p->w = be32(body), p->h = be32(body + 4), p->depth = body[8], p->color = body[9];
            p->interlace = body[12];
            ihdr = 1;
        } else if (!memcmp(type, "PLTE", 4)) {
            p->n_pal = (int)(len / 3 > 256 ? 256 : len / 3);
            memcpy(p->pal, body, (size_t)p->n_pal * 3);
        } else if (!memcmp(type, "IDAT", 4) && len) {   /* (an empty one adds nothing) */
            if (p->n_idat + len > p->cap_idat) {
                p->cap_idat = (p->n_idat + len) * 2;
                p->idat = realloc(p->idat, p->cap_idat);
            }
            memcpy(p->idat + p->n_idat, body, len);
            p->n_idat += len;
        } else if (!memcmp(type, "IEND", 4))
            break;
        at += 12 + (size_t)len;
    }
    if (!ihdr || !p->n_idat)
        return "no IHDR or no IDAT chunk";
    if (!p->w || !p->h || (uint64_t)p->w * p->h > IMAGE_MAX_PIXELS)
        return "a width or height of 0, or more than 2^26 pixels (8192 x 8192)";
    if (p->interlace)
        return "an interlaced PNG (not read; save it without interlacing)";
    if (p->depth == 16)
        return "a PNG of 16-bit samples (not read; save it with 8)";
    int ok = (p->color == 0 && (p->depth == 1 || p->depth == 2 || p->depth == 4 || p->depth == 8)) ||
             (p->color == 3 && p->depth <= 8 && p->n_pal) ||
             ((p->color == 2 || p->color == 4 || p->color == 6) && p->depth == 8);
    return ok ? NULL : "a color type and bit depth PNG does not define (or a palette missing)";
}

/* The image as RGB (3 bytes a pixel) or gray (1), alpha dropped: *ch 3 or 1 */
static const char *png_decode(const unsigned char *d, size_t n, ImageU8 *im)
{
    Png p = {0};
    const char *why = png_chunks(d, n, &p);
    if (why) {
        free(p.idat);
        return why;
    }
    static const int samples[7] = {1, 0, 3, 1, 2, 0, 4};
    int spp = samples[p.color], bpp = (spp * p.depth + 7) / 8;
    size_t stride = ((size_t)p.w * (size_t)spp * (size_t)p.depth + 7) / 8;
    uLongf raw_n = (uLongf)((stride + 1) * p.h);
    unsigned char *raw = xcalloc(raw_n, 1), *rows = xcalloc(stride * p.h, 1);
    int z = uncompress(raw, &raw_n, p.idat, (uLong)p.n_idat);
    free(p.idat);
    if (z != Z_OK || raw_n != (stride + 1) * p.h || png_unfilter(raw, rows, p.h, stride, bpp)) {
        free(raw), free(rows);
        return "its image data do not inflate to the rows IHDR says (or a row filter past 4)";
    }
    free(raw);
    int rgb = p.color == 2 || p.color == 3 || p.color == 6;
    im->w = p.w, im->h = p.h, im->ch = rgb ? 3 : 1;
    im->px = xcalloc((size_t)p.w * p.h * (size_t)im->ch, 1);
    for (uint32_t y = 0; y < p.h; y++)
        for (uint32_t x = 0; x < p.w; x++) {
            const unsigned char *row = rows + y * stride;
            unsigned char *o = im->px + ((size_t)y * p.w + x) * (size_t)im->ch;
            if (p.color == 3) {
                int k = png_sample(row, x, p.depth);
                for (int c = 0; c < 3; c++)
                    o[c] = k < p.n_pal ? p.pal[k][c] : 0;
            } else if (p.color == 0) {   /* gray of depth < 8 scaled to 0..255 */
                int v = png_sample(row, x, p.depth);
                o[0] = (unsigned char)(v * 255 / ((1 << p.depth) - 1));
            } else
                for (int c = 0; c < im->ch; c++)
                    o[c] = row[(size_t)x * (size_t)spp + (size_t)c];
        }
    free(rows);
    return NULL;
}

/* ---- JPEG --------------------------------------------------------------------------- */

typedef struct JpegErr {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
} JpegErr;

static void jpeg_fail(j_common_ptr c)
{
    JpegErr *e = (JpegErr *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jump, 1);
}

static void jpeg_quiet(j_common_ptr c, int level) { (void)c, (void)level; }

static const char *jpeg_decode(const unsigned char *d, size_t n, ImageU8 *im)
{
    static char why[JMSG_LENGTH_MAX + 64];
    struct jpeg_decompress_struct c;
    JpegErr e;
    c.err = jpeg_std_error(&e.mgr);
    e.mgr.error_exit = jpeg_fail;
    e.mgr.emit_message = jpeg_quiet;
    im->px = NULL;
    if (setjmp(e.jump)) {
        jpeg_destroy_decompress(&c);
        free(im->px);
        snprintf(why, sizeof why, "libjpeg: %s", e.msg);
        return why;
    }
    jpeg_create_decompress(&c);
    jpeg_mem_src(&c, d, (unsigned long)n);
    jpeg_read_header(&c, TRUE);
    if ((uint64_t)c.image_width * c.image_height > IMAGE_MAX_PIXELS) {
        jpeg_destroy_decompress(&c);
        return "more than 2^26 pixels (8192 x 8192)";
    }
    if (c.num_components != 1 && c.num_components != 3) {
        jpeg_destroy_decompress(&c);
        return "a JPEG of other than 1 or 3 components (CMYK is not read)";
    }
    c.out_color_space = c.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(&c);
    im->w = c.output_width, im->h = c.output_height, im->ch = c.output_components;
    im->px = xcalloc((size_t)im->w * im->h * (size_t)im->ch, 1);
    while (c.output_scanline < c.output_height) {
        JSAMPROW row = im->px + (size_t)c.output_scanline * im->w * (size_t)im->ch;
        jpeg_read_scanlines(&c, &row, 1);
    }
    jpeg_finish_decompress(&c);
    jpeg_destroy_decompress(&c);
    return NULL;
}

const char *image_read(const char *path, ImageU8 *im)
{
    static char why[300];
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, sizeof why, "cannot open: %s", strerror(errno));
        return why;
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *d = xcalloc(cap, 1);
    for (size_t r; (r = fread(d + n, 1, cap - n, f)) > 0;)
        if ((n += r) == cap)
            d = realloc(d, cap *= 2);
    fclose(f);
    const char *res;
    if (n >= 8 && !memcmp(d, "\x89PNG\r\n\x1a\n", 8))
        res = png_decode(d, n, im);
    else if (n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff)
        res = jpeg_decode(d, n, im);
    else
        res = "neither a PNG nor a JPEG (by its first bytes)";
    free(d);
    return res;
}

/* ---- Image.convert, Image.resize, center_crop ----------------------------------------- */

void image_convert(ImageU8 *im, int ch)
{
    if (im->ch == ch)
        return;
    size_t n = (size_t)im->w * im->h;
    unsigned char *o = xcalloc(n * (size_t)ch, 1);
    for (size_t i = 0; i < n; i++) {
        const unsigned char *p = im->px + i * (size_t)im->ch;
        if (ch == 3)   /* L to RGB: the value thrice */
            o[3 * i] = o[3 * i + 1] = o[3 * i + 2] = p[0];
        else           /* RGB to L: Pillow's L24, (R 19595 + G 38470 + B 7471 + 2^15) >> 16 */
            o[i] = (unsigned char)((p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);
    }
    free(im->px);
    im->px = o, im->ch = ch;
}

enum { RS_BITS = 22 };   /* Pillow's PRECISION_BITS for 8-bit bands: 32 - 8 - 2 */

/* Pillow's resampling filters (Resample.c), by its numbers: 1 LANCZOS, 2 BILINEAR,
 * 3 BICUBIC, 4 BOX, 5 HAMMING; and their supports */
static double sinc(double x)
{
    return x == 0.0 ? 1.0 : sin(x * M_PI) / (x * M_PI);
}
static double rs_filter(int f, double x)
{
    switch (f) {
    case IMAGE_BOX:
        return x > -0.5 && x <= 0.5 ? 1.0 : 0.0;
    case IMAGE_BILINEAR:
        x = fabs(x);
        return x < 1.0 ? 1.0 - x : 0.0;
    case IMAGE_HAMMING:
        x = fabs(x);
        return x == 0.0 ? 1.0 : x >= 1.0 ? 0.0 : sin(x * M_PI) / (x * M_PI) * (0.54 + 0.46 * cos(x * M_PI));
    case IMAGE_BICUBIC: {   /* a = -0.5 */
        const double a = -0.5;
        x = fabs(x);
        return x < 1.0 ? ((a + 2.0) * x - (a + 3.0)) * x * x + 1 :
               x < 2.0 ? (((x - 5) * x + 8) * x - 4) * a : 0.0;
    }
    default:   /* IMAGE_LANCZOS, a = 3 */
        return x >= -3.0 && x < 3.0 ? sinc(x) * sinc(x / 3) : 0.0;
    }
}
static const double rs_support[6] = {0, 3.0, 1.0, 2.0, 0.5, 1.0};

/* Pillow's precompute_coeffs with FILTER, then its 8-bit normalization: each output
 * place's first input, count and fixed-point weights (k: [out, ksize]); returns ksize */
static int rs_coeffs(int in, int out, int filter, int **bounds, int32_t **k)
{
    double scale = (double)in / out, fs = scale < 1.0 ? 1.0 : scale;
    double support = rs_support[filter] * fs;
    int ksize = (int)ceil(support) * 2 + 1;
    *bounds = xcalloc((size_t)out * 2 * sizeof **bounds, 1);
    *k = xcalloc((size_t)out * (size_t)ksize * sizeof **k, 1);
    double *w = xcalloc((size_t)ksize * sizeof *w, 1);
    for (int xx = 0; xx < out; xx++) {
        double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / fs;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        xmin = xmin < 0 ? 0 : xmin;
        xmax = (xmax > in ? in : xmax) - xmin;
        for (int x = 0; x < xmax; x++) {
            w[x] = rs_filter(filter, (x + xmin - center + 0.5) * ss);
            ww += w[x];
        }
        for (int x = 0; x < ksize; x++) {
            double v = x < xmax && ww != 0.0 ? w[x] / ww : 0.0;
            (*k)[xx * ksize + x] = (int32_t)(v < 0 ? -0.5 + v * (1 << RS_BITS) : 0.5 + v * (1 << RS_BITS));
        }
        (*bounds)[2 * xx] = xmin, (*bounds)[2 * xx + 1] = xmax;
    }
    free(w);
    return ksize;
}

static unsigned char clip8(int32_t v)
{
    int32_t s = v >> RS_BITS;
    return (unsigned char)(s < 0 ? 0 : s > 255 ? 255 : s);
}

/* One pass along x (step 1 pixel) or y (step a row): src [h][w][ch] -> dst */
static void rs_pass(const unsigned char *src, unsigned char *dst, int w, int h, int ch, int out,
                    int filter, int along_x)
{
    int *b;
    int32_t *k;
    int ks = rs_coeffs(along_x ? w : h, out, filter, &b, &k);
    int ow = along_x ? out : w, oh = along_x ? h : out;
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++)
            for (int c = 0; c < ch; c++) {
                int at = along_x ? x : y, first = b[2 * at], cnt = b[2 * at + 1];
                int32_t s = 1 << (RS_BITS - 1);
                for (int j = 0; j < cnt; j++) {
                    int sx = along_x ? first + j : x, sy = along_x ? y : first + j;
                    s += src[((size_t)sy * (size_t)w + (size_t)sx) * (size_t)ch + (size_t)c] *
                         k[at * ks + j];
                }
                dst[((size_t)y * (size_t)ow + (size_t)x) * (size_t)ch + (size_t)c] = clip8(s);
            }
    free(b), free(k);
}

void image_resize(ImageU8 *im, int W, int H, int filter)
{
    int w = (int)im->w, h = (int)im->h, ch = im->ch;
    unsigned char *t = im->px;
    if (w != W) {   /* the horizontal pass first, as Pillow's (none where the size holds) */
        unsigned char *o = xcalloc((size_t)W * (size_t)h * (size_t)ch, 1);
        rs_pass(t, o, w, h, ch, W, filter, 1);
        free(t);
        t = o, w = W;
    }
    if (h != H) {
        unsigned char *o = xcalloc((size_t)w * (size_t)H * (size_t)ch, 1);
        rs_pass(t, o, w, h, ch, H, filter, 0);
        free(t);
        t = o, h = H;
    }
    im->px = t, im->w = (uint32_t)w, im->h = (uint32_t)h;
}

/* Along one axis of N pixels to C: the first source pixel kept and the first place it
 * lands (transformers' center_crop: the start (N - C) // 2, or where N < C the image
 * padded with zeros, ceil((C - N) / 2) before it) */
static void crop_axis(int n, int c, int *from, int *to)
{
    *from = n >= c ? (n - c) / 2 : 0;
    *to = n >= c ? 0 : (c - n + 1) / 2;
}

void image_center_crop(ImageU8 *im, int W, int H)
{
    int fx, tx, fy, ty, w = (int)im->w, h = (int)im->h;
    crop_axis(w, W, &fx, &tx);
    crop_axis(h, H, &fy, &ty);
    int cw = w - fx < W - tx ? w - fx : W - tx, chh = h - fy < H - ty ? h - fy : H - ty;
    size_t px = (size_t)im->ch;
    unsigned char *o = xcalloc((size_t)W * (size_t)H * px, 1);
    for (int y = 0; y < chh; y++)
        memcpy(o + ((size_t)(ty + y) * (size_t)W + (size_t)tx) * px,
               im->px + ((size_t)(fy + y) * (size_t)w + (size_t)fx) * px, (size_t)cw * px);
    free(im->px);
    im->px = o, im->w = (uint32_t)W, im->h = (uint32_t)H;
}
