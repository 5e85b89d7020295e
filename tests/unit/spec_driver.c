/* spec_driver.c: runs spec_load alone (as `trainc check` will, without the graph) so
 * the bad-input corpus can test the parser by itself:
 *   spec_driver [check] SPEC... [--set KEY=VALUE]...   prints "ok" and the canonical
 * training lines and hash with -v. */
#include <string.h>
#include "trainc.h"

static Spec *keep;   /* reachable at exit, for LeakSanitizer */

int main(int argc, char **argv)
{
    int i = 1, verbose = 0;
    if (i < argc && !strcmp(argv[i], "check"))
        i++;
    if (i < argc && !strcmp(argv[i], "-v")) {
        verbose = 1;
        i++;
    }
    int nfiles = 0;
    while (i + nfiles < argc && strcmp(argv[i + nfiles], "--set"))
        nfiles++;
    keep = spec_load(nfiles, argv + i);
    for (i += nfiles; i + 1 < argc && !strcmp(argv[i], "--set"); i += 2)
        spec_set(keep, argv[i + 1]);
    printf("ok\n");
    if (verbose) {
        printf("model %s, %d inputs, %d layers, data_dir %s, hash %s\n", keep->name,
               keep->n_inputs, keep->n_layers, keep->data_dir, keep->hash);
        for (int j = 0; j < keep->n_train_lines; j++)
            printf("  %s\n", keep->train_lines[j]);
    }
    return 0;
}
