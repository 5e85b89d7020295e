/* fuzz_image.c: `trainc data images`' reader on any bytes: compiler/image_read.c's PNG
 * decoder (the chunks, zlib's inflate of IDAT, the row filters, depths 1 to 8, palettes)
 * and its JPEG path through libjpeg, then Image.convert's twins (to RGB and to L),
 * Pillow's resampling (bicubic and lanczos, shrinking and enlarging) and the centre crop
 * (inside the image and past it). An image that cannot be read is a
 * reason returned, no exit; the decoded pixels must have the sizes asked for. */
#include "fuzz.h"
#include "../compiler/cmd.h"   /* ImageU8, image_read, image_convert, image_resize */

/* one channel count, size W x H by FILTER, then crop to S x S: the pixels must be ch x S x S */
static void shaped(const ImageU8 *src, int ch, int W, int H, int filter, int S)
{
    ImageU8 im = *src;
    size_t n = (size_t)im.w * im.h * (size_t)im.ch;
    im.px = malloc(n);
    memcpy(im.px, src->px, n);
    image_convert(&im, ch);
    image_resize(&im, W, H, filter);
    image_center_crop(&im, S, S);
    if (im.w != (uint32_t)S || im.h != (uint32_t)S || im.ch != ch)
        abort();
    volatile unsigned sum = 0;   /* every byte read (MSan/ASan see a short buffer) */
    for (size_t i = 0; i < (size_t)S * S * (size_t)ch; i++)
        sum += im.px[i];
    free(im.px);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".img");
    ImageU8 im;
    if (image_read(path, &im))
        return 0;   /* a reason: not an image trainc reads */
    if ((uint64_t)im.w * im.h <= 1 << 20) {   /* (the resampling's cost: small images only) */
        shaped(&im, 3, 13, 9, IMAGE_BICUBIC, 11);
        shaped(&im, 1, 40, 41, IMAGE_LANCZOS, 40);
    }
    free(im.px);
    return 0;
}
