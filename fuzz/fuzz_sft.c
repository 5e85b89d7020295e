/* fuzz_sft.c: `trainc data sft FILE.jsonl DIR --tokenizer TOK --seq-len T ...` on any
 * bytes: the JSON lines (prompt-completion rows and conversations), the chat templates
 * of runtime/chat.c, TRL's masking, --pack's rows and the .npy writer
 * (compiler/data_sft.c). The input's first three bytes choose the command line, the rest
 * is FILE.jsonl:
 *   byte 0: the form, by its value mod 8: prompt-completion rows, or --chat llama3,
 *           chatml, gemma, phi3, mistral, llama2, zephyr;
 *   byte 1: bit 0 --pack, bit 1 --val-frac 0.5 (else 0), bit 2 --eos "</s>" (rows alone),
 *           bit 3 the SentencePiece-style tokenizer (else the byte-level one);
 *   byte 2: --seq-len, 1 + its value mod 64.
 * The tokenizers are fuzz/sft/'s (FUZZ_SFT_DIR overrides; fuzz/README.md says how they
 * were made): the byte-level one holds every template's own tokens as added tokens.
 * compiler/main.c is linked in with its main renamed, as for fuzz_spec. */
#include "fuzz.h"
#include <sys/stat.h>

int trainc_main(int argc, char **argv);
void data_abandon(void);

static const char *const forms[8] = {NULL,     "llama3", "chatml", "gemma",
                                     "phi3",   "mistral", "llama2", "zephyr"};

/* the last input's outputs gone: DIR/{train,val}_{x,y,pos}.npy and their .part files */
static void clear_outputs(const char *out)
{
    static const char *const names[] = {"train", "val"}, *const parts[] = {"x", "y", "pos"};
    char p[256];
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 3; k++) {
            snprintf(p, sizeof p, "%s/%s_%s.npy", out, names[i], parts[k]);
            unlink(p);
            snprintf(p, sizeof p, "%s/%s_%s.npy.part", out, names[i], parts[k]);
            unlink(p);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    static char out[128], tok[512], seq[16];
    const char *dir = getenv("FUZZ_SFT_DIR") ? getenv("FUZZ_SFT_DIR") : "fuzz/sft";
    snprintf(out, sizeof out, "/tmp/trainc-fuzz-sft-%d.out", (int)getpid());
    clear_outputs(out);
    const char *form = forms[data[0] % 8];
    int flags = data[1];
    snprintf(tok, sizeof tok, "%s/tokenizer_%s.json", dir, flags & 8 ? "sp" : "bytelevel");
    snprintf(seq, sizeof seq, "%d", 1 + data[2] % 64);
    const char *file = fuzz_file(data + 3, size - 3, ".jsonl");
    char *argv[16] = {"trainc", "data", "sft", (char *)file, out, "--tokenizer", tok,
                      "--seq-len", seq};
    int argc = 9;
    if (form) {
        argv[argc++] = "--chat";
        argv[argc++] = (char *)form;
    } else if (flags & 4) {
        argv[argc++] = "--eos";
        argv[argc++] = "</s>";
    }
    if (flags & 1)
        argv[argc++] = "--pack";
    argv[argc++] = "--val-frac";
    argv[argc++] = flags & 2 ? "0.5" : "0";
    argv[argc] = NULL;
    FILE *keep = stdout;
    stdout = fopen("/dev/null", "w");   /* the summary lines */
    FUZZ_RUN(trainc_main(argc, argv));
    if (fuzz_jumped)
        data_abandon();   /* the .part files an exit would have removed */
    fclose(stdout);
    stdout = keep;
    return 0;
}
