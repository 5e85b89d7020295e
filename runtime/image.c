/* image.c: generated samples as files: an .npy of the values (format 1.0, '<f4', C
 * order) and a PNG grid drawn as torchvision's make_grid + save_image draw one (the
 * rule is rt.h's, at rt_png_grid_write). The PNG needs no library: its image data is
 * one zlib stream of deflate "stored" blocks (no compression; a sample grid is small),
 * with the CRC-32 of each chunk and the stream's Adler-32 computed here. Both files
 * are written under NAME.tmp and renamed into place. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "rt.h"

/* the values go out with fwrite, as '<f4' says: little-endian */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "image.c assumes a little-endian host"
#endif

/* ---- .npy ----------------------------------------------------------------------- */

/* The header numpy's np.save writes for a C-order float32 array of this shape:
 * magic, version 1.0, the length (uint16 LE), then the dict padded with spaces and
 * ended by '\n' so that the data starts at a multiple of 64 bytes. Returns its bytes
 * (at most 512: rank <= 7 dimensions of at most 19 digits). */
static int npy_header(char *h, int64_t n, int rank, const int64_t *shape)
{
    int len = snprintf(h + 10, 400, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld%s",
                       (long long)n, rank == 0 ? "," : "");
    for (int i = 0; i < rank; i++)
        len += snprintf(h + 10 + len, 400 - len, ", %lld", (long long)shape[i]);
    len += snprintf(h + 10 + len, 400 - len, "), }");
    int total = (10 + len + 1 + 63) / 64 * 64;   /* + '\n' */
    memset(h + 10 + len, ' ', total - 10 - len - 1);
    h[total - 1] = '\n';
    memcpy(h, "\x93NUMPY\x01\x00", 8);
    h[8] = (char)((total - 10) & 0xff);
    h[9] = (char)((total - 10) >> 8);
    return total;
}

/* The elements of n rows of shape into *count; -1 (errno) for a bad shape or a size
 * fwrite's size_t cannot take. */
static int npy_count(int64_t n, int rank, const int64_t *shape, int64_t *count)
{
    if (n < 0 || rank < 0 || rank > 7 || (rank > 0 && !shape)) {
        errno = EINVAL;
        return -1;
    }
    *count = n;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0) {
            errno = EINVAL;
            return -1;
        }
        if (shape[i] > 0 && *count > (int64_t)(SIZE_MAX / 8) / shape[i]) {
            errno = EFBIG;
            return -1;
        }
        *count *= shape[i];
    }
    return 0;
}

FILE *rt_npy_stream_open(const char *path, int64_t n, int rank, const int64_t *shape)
{
    int64_t count;
    if (!path || npy_count(n, rank, shape, &count) != 0)
        return NULL;
    char h[512];
    int hl = npy_header(h, n, rank, shape);
    FILE *f = rt_tmp_open(path);
    if (f)   /* (a short write sets the error rt_tmp_commit reads) */
        fwrite(h, 1, (size_t)hl, f);
    return f;
}

int rt_npy_write_f32(const char *path, const float *x, int64_t n, int rank, const int64_t *shape)
{
    int64_t count;
    if (!path || npy_count(n, rank, shape, &count) != 0)
        return -1;
    if (count > 0 && !x) {
        errno = EINVAL;
        return -1;
    }
    FILE *f = rt_npy_stream_open(path, n, rank, shape);
    if (!f)
        return -1;
    if (count > 0)
        fwrite(x, sizeof *x, (size_t)count, f);
    return rt_tmp_commit(f, path);
}

/* ---- PNG: chunks and checksums -------------------------------------------------- */

typedef struct {
    FILE *f;
    uint32_t crc;          /* the running CRC-32 register of the open chunk */
    uint32_t table[256];   /* CRC-32 (ISO-HDLC, reflected 0xEDB88320), a byte at a time */
} png_out;

static void crc_table(uint32_t t[256])
{
    for (uint32_t k = 0; k < 256; k++) {
        uint32_t c = k;
        for (int b = 0; b < 8; b++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        t[k] = c;
    }
}

/* Adler-32 (RFC 1950) of n more bytes: sums mod 65521, reduced every 5552 bytes,
 * zlib's NMAX: the largest k with 255k(k+1)/2 + (k+1)*65520 < 2^32, so that b (the
 * larger sum) cannot overflow 32 bits between two reductions. */
static uint32_t adler32(uint32_t adler, const unsigned char *p, size_t n)
{
    uint32_t a = adler & 0xffff, b = adler >> 16;
    while (n > 0) {
        size_t k = n < 5552 ? n : 5552;
        n -= k;
        while (k--) {
            a += *p++;
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    return b << 16 | a;
}

/* Bytes of the open chunk's type and data: written, and counted into its CRC. */
static void put(png_out *o, const void *p, size_t n)
{
    const unsigned char *s = p;
    uint32_t c = o->crc;
    for (size_t i = 0; i < n; i++)
        c = o->table[(c ^ s[i]) & 0xff] ^ (c >> 8);
    o->crc = c;
    fwrite(p, 1, n, o->f);   /* a short write sets the error rt_tmp_commit reads */
}

static void be32(unsigned char *b, uint32_t v)
{
    b[0] = (unsigned char)(v >> 24);
    b[1] = (unsigned char)(v >> 16);
    b[2] = (unsigned char)(v >> 8);
    b[3] = (unsigned char)v;
}

/* A chunk is its data's length (big-endian, outside the CRC), its type, the data,
 * then the CRC-32 of type and data. */
static void chunk_begin(png_out *o, const char *type, uint32_t len)
{
    unsigned char b[4];
    be32(b, len);
    fwrite(b, 1, 4, o->f);
    o->crc = 0xffffffffu;
    put(o, type, 4);
}

static void chunk_end(png_out *o)
{
    unsigned char b[4];
    be32(b, o->crc ^ 0xffffffffu);
    fwrite(b, 1, 4, o->f);
}

/* The bytes of the zlib stream of `len` bytes in stored blocks: header, a 5-byte
 * block header per 65535 bytes (one block when len is 0), Adler-32. */
static int64_t zlib_stored_len(int64_t len)
{
    int64_t blocks = len == 0 ? 1 : (len + 65534) / 65535;
    return 2 + 5 * blocks + len + 4;
}

/* One IDAT chunk: the scanlines as a zlib stream (RFC 1950: CMF 0x78 = deflate with a
 * 32 KiB window, FLG 0x01 so that CMF*256 + FLG is a multiple of 31, no dictionary)
 * of stored blocks (RFC 1951 BTYPE 00: a header byte, BFINAL on the last, then LEN
 * and its complement NLEN, little-endian, then LEN bytes as they are). */
static void put_idat(png_out *o, const unsigned char *raw, size_t len)
{
    chunk_begin(o, "IDAT", (uint32_t)zlib_stored_len((int64_t)len));
    put(o, "\x78\x01", 2);
    size_t at = 0;
    do {
        size_t k = len - at < 65535 ? len - at : 65535;
        unsigned char h[5] = {at + k == len, (unsigned char)(k & 0xff), (unsigned char)(k >> 8),
                              (unsigned char)(~k & 0xff), (unsigned char)((~k >> 8) & 0xff)};
        put(o, h, 5);
        put(o, raw + at, k);
        at += k;
    } while (at < len);
    unsigned char a[4];
    be32(a, adler32(1, raw, len));
    put(o, a, 4);
    chunk_end(o);
}

/* The PNG file: signature, IHDR (8-bit gray or RGB, no interlace), IDAT, IEND. */
static int png_write(const char *path, const unsigned char *raw, size_t len, uint32_t width,
                     uint32_t height, int channels)
{
    png_out o;
    crc_table(o.table);
    o.f = rt_tmp_open(path);
    if (!o.f)
        return -1;
    fwrite("\x89PNG\r\n\x1a\n", 1, 8, o.f);
    unsigned char ihdr[13];
    be32(ihdr, width);
    be32(ihdr + 4, height);
    ihdr[8] = 8;                         /* bits a sample */
    ihdr[9] = channels == 1 ? 0 : 2;     /* color type: gray, RGB */
    ihdr[10] = ihdr[11] = ihdr[12] = 0;  /* deflate, adaptive filtering, no interlace */
    chunk_begin(&o, "IHDR", 13);
    put(&o, ihdr, 13);
    chunk_end(&o);
    put_idat(&o, raw, len);
    chunk_begin(&o, "IEND", 0);
    chunk_end(&o);
    return rt_tmp_commit(o.f, path);
}

/* ---- the grid ------------------------------------------------------------------- */

/* make_grid's normalize then save_image's rounding, in fp32 as torch computes them:
 * (x - lo) / d, then * 255, then + 0.5 (two roundings, never fused: the runtime is
 * built with -ffp-contract=off), clamped to [0, 255] and truncated. NaN (a NaN in the
 * batch makes every value NaN) becomes 0, as torch's uint8 conversion gives on x86. */
static unsigned char to_byte(float x, float lo, float d)
{
    float v = (x - lo) / d;
    float p = v * 255.0f;
    p = p + 0.5f;
    if (!(p > 0.0f))
        return 0;
    return p >= 255.0f ? 255 : (unsigned char)p;
}

/* The scanlines of the grid (gw x gh pixels of C bytes, each row after its filter
 * byte 0), zero (pad_value 0) but for image k at grid cell (k / ncol, k % ncol), whose
 * top-left pixel is at (pad + row * (H + pad), pad + col * (W + pad)). */
static void draw_grid(unsigned char *raw, const float *x, int64_t n, int C, int H, int W,
                      int64_t ncol, int pad, int64_t gw)
{
    /* make_grid's range: torch's min and max over the whole batch (NaN if any is) */
    int64_t count = n * C * (int64_t)H * W;
    float lo = x[0], hi = x[0];
    for (int64_t i = 0; i < count; i++) {
        if (x[i] != x[i]) {
            lo = hi = x[i];
            break;
        }
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    /* norm_ip divides by max(high - low, 1e-5): Python doubles, then fp32 in torch's
     * kernel; Python's max keeps a NaN first argument */
    double range = (double)hi - (double)lo;
    float d = (float)(1e-5 > range ? 1e-5 : range);
    size_t stride = 1 + (size_t)gw * C;
    for (int64_t k = 0; k < n; k++) {
        int64_t top = pad + k / ncol * (H + pad), left = pad + k % ncol * (W + pad);
        for (int c = 0; c < C; c++)
            for (int i = 0; i < H; i++) {
                const float *src = x + ((k * C + c) * H + i) * (int64_t)W;
                unsigned char *dst = raw + (size_t)(top + i) * stride + 1 + (size_t)left * C + c;
                for (int j = 0; j < W; j++)
                    dst[(size_t)j * C] = to_byte(src[j], lo, d);
            }
    }
}

int rt_png_grid_write(const char *path, const float *x, int64_t n, int C, int H, int W, int nrow)
{
    if (!path || !x || n < 1 || (C != 1 && C != 3) || H < 1 || W < 1 || nrow < 1) {
        errno = EINVAL;
        return -1;
    }
    /* make_grid returns a batch of one as the image itself: no padding */
    int pad = n == 1 ? 0 : 2;
    int64_t ncol = n < nrow ? n : nrow, rows = (n + ncol - 1) / ncol;
    /* PNG's sides are at most 2^31 - 1, and the one IDAT chunk's length too */
    if (rows > (INT32_MAX - pad) / ((int64_t)H + pad) ||
        ncol > (INT32_MAX - pad) / ((int64_t)W + pad)) {
        errno = EFBIG;
        return -1;
    }
    int64_t gw = pad + ncol * (W + pad), gh = pad + rows * (H + pad);
    int64_t stride = 1 + gw * C;
    if (stride > INT32_MAX / gh || zlib_stored_len(stride * gh) > INT32_MAX) {
        errno = EFBIG;
        return -1;
    }
    size_t len = (size_t)(stride * gh);
    unsigned char *raw = rt_xmalloc(len);   /* zeroed: the padding and the filter bytes */
    draw_grid(raw, x, n, C, H, W, ncol, pad, gw);
    int rc = png_write(path, raw, len, (uint32_t)gw, (uint32_t)gh, C);
    int err = errno;
    rt_xfree(raw);
    errno = err;
    return rc;
}
