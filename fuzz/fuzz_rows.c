/* fuzz_rows.c: the data commands that write a text classifier's padded rows, on any
 * bytes: `trainc data classify`, `data tags`, `data mlm` and `data pairs`
 * (compiler/data_classify.c, data_tags.c, data_mlm.c, data_pairs.c: the JSON lines or text
 * lines, the model.json they read, the tokenizer's templates and words given apart,
 * truncation, the masks, a reward model's pairs, the .npy writer).
 * The input's first three bytes choose the command line and the model, the rest is FILE:
 *   byte 0: the command by its two low bits (classify, tags, mlm, pairs); bit 2 the byte-level
 *           tokenizer (RoBERTa's kind; else BERT's WordPiece); bit 3 a "types" input;
 *           bit 4 a last_token layer (rows padded on the left; pairs: a dpo model, y [2T],
 *           and --eos); bit 5 --val-frac 0.5
 *           (else 0); bit 6 --unlabeled (mlm: --copies 2; a dpo model's pairs: an orpo
 *           model, its sft target t [T]); bit 7 --pair hypothesis (a dpo model's pairs: a
 *           kto model, its label, TRL's unpaired lines and --kl-group 3)
 *           (tags: --all-pieces);
 *   byte 1: the rows' length T, 1 + its value mod 48 (pairs: 2T, two texts of T);
 *   byte 2: the classes, 2 + its value mod 6, named "a", "b", ... (mlm: the vocabulary).
 * The model.json is written for each input; the tokenizers are fuzz/rows/'s (FUZZ_ROWS_DIR
 * overrides; fuzz/README.md says how they were made). compiler/main.c is linked in with
 * its main renamed, as for fuzz_spec. */
#include "fuzz.h"
#include <sys/stat.h>

int trainc_main(int argc, char **argv);
void data_abandon(void);

/* the last input's outputs gone: DIR/{train,val,test}_*.npy and their .part files */
static void clear_outputs(const char *out)
{
    static const char *const names[] = {"train", "val", "test"},
                             *const parts[] = {"x", "types", "pos", "y", "words", "t", "label"};
    char p[256];
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 7; k++) {
            snprintf(p, sizeof p, "%s/%s_%s.npy", out, names[i], parts[k]);
            unlink(p);
            snprintf(p, sizeof p, "%s/%s_%s.npy.part", out, names[i], parts[k]);
            unlink(p);
        }
}

/* a dpo model's model.json at PATH: x, [types,] pos, y [T2] (512 classes), ref [2]; with
 * ORPO an orpo model's, t [T2 / 2] its sft target in place of ref; with KTO a kto model's,
 * ref and label [] */
static void write_dpo_model(const char *path, int64_t T2, int types, int orpo, int kto)
{
    FILE *f = fopen(path, "w");
    if (!f)
        abort();
    fprintf(f, "{\"model\": {\"inputs\": {\"x\": {\"shape\": [%lld], \"dtype\": \"i32\"}, %s"
               "\"pos\": {\"shape\": [%lld], \"dtype\": \"i32\"}, \"y\": {\"shape\": [%lld], "
               "\"dtype\": \"i32\", \"classes\": 512}, ", (long long)T2,
            types ? "\"types\": {\"shape\": [1], \"dtype\": \"i32\"}, " : "", (long long)T2,
            (long long)T2);
    if (orpo)
        fprintf(f, "\"t\": {\"shape\": [%lld], \"dtype\": \"i32\", \"classes\": 512}}, ",
                (long long)(T2 / 2));
    else
        fprintf(f, "\"ref\": {\"shape\": [2], \"dtype\": \"f32\"}%s}, ",
                kto ? ", \"label\": {\"shape\": [], \"dtype\": \"i32\", \"classes\": 2}" : "");
    fprintf(f, "\"positions\": \"pos\", \"layers\": [{\"op\": \"embedding\"}, "
               "{\"op\": \"attention\"}, {\"op\": \"linear\"}], \"loss\": {\"op\": \"%s\", "
               "\"target\": \"y\", %s}}}\n", orpo ? "orpo" : kto ? "kto" : "dpo",
            orpo  ? "\"sft_target\": \"t\""
            : kto ? "\"reference\": \"ref\", \"label\": \"label\""
                  : "\"reference\": \"ref\"");
    fclose(f);
}

/* model.json at PATH: inputs x, [types,] pos [T] and y (the class, or [T] for tags and
 * mlm) of K classes, the positions, and an encoder's layers (an attention without a
 * causal mask) whose last is tied for mlm (a last_token before it where LEFT); for pairs
 * x and pos [2T], a causal attention and a last_token with segments 2, or (LEFT) a dpo
 * language model (ORPO: an orpo one; KTO: a kto one) */
static void write_model(const char *path, int cmd, int64_t T, int64_t K, int types, int left,
                        int orpo, int kto)
{
    if (cmd == 3)
        T *= 2;
    if (cmd == 3 && left) {
        write_dpo_model(path, T, types, orpo, kto && !orpo);
        return;
    }
    FILE *f = fopen(path, "w");
    if (!f)
        abort();
    static const char names[] = "\"a\", \"b\", \"c\", \"d\", \"e\", \"f\", \"g\"";
    fprintf(f, "{\"model\": {\"inputs\": {\"x\": {\"shape\": [%lld], \"dtype\": \"i32\"}, ",
            (long long)T);
    if (types)
        fprintf(f, "\"types\": {\"shape\": [%lld], \"dtype\": \"i32\"}, ", (long long)T);
    fprintf(f, "\"pos\": {\"shape\": [%lld], \"dtype\": \"i32\"}, ", (long long)T);
    if (cmd == 0 || cmd == 3)
        fprintf(f, "\"y\": {\"shape\": [], \"dtype\": \"i32\", \"classes\": %lld, "
                   "\"labels\": [%.*s]}}, ", (long long)K, (int)(K * 5 - 2), names);
    else
        fprintf(f, "\"y\": {\"shape\": [%lld], \"dtype\": \"i32\", \"classes\": %lld}}, ",
                (long long)T, cmd == 2 ? 512LL : (long long)K);
    fprintf(f, "\"positions\": \"pos\", \"layers\": [{\"op\": \"embedding\", \"name\": \"embed\"}, "
               "{\"op\": \"attention\"%s}%s, {\"op\": \"linear\"%s}]}}\n",
            cmd == 3 ? "" : ", \"causal\": false",
            cmd == 3 ? ", {\"op\": \"last_token\", \"segments\": 2}"
                     : left ? ", {\"op\": \"last_token\"}" : "",
            cmd == 2 ? ", \"tie\": \"embed\"" : "");
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    static char out[128], tok[512], model[128];
    static const char *const cmds[4] = {"classify", "tags", "mlm", "pairs"};
    const char *dir = getenv("FUZZ_ROWS_DIR") ? getenv("FUZZ_ROWS_DIR") : "fuzz/rows";
    snprintf(out, sizeof out, "/tmp/trainc-fuzz-rows-%d.out", (int)getpid());
    snprintf(model, sizeof model, "/tmp/trainc-fuzz-rows-%d.model.json", (int)getpid());
    clear_outputs(out);
    int cmd = data[0] & 3, flags = data[0];
    write_model(model, cmd, 1 + data[1] % 48, 2 + data[2] % 6, flags & 8, flags & 16, flags & 64,
                flags & 128);
    snprintf(tok, sizeof tok, "%s/tokenizer_%s.json", dir, flags & 4 ? "bytelevel" : "wordpiece");
    const char *file = fuzz_file(data + 3, size - 3, cmd == 2 ? ".txt" : ".jsonl");
    char *argv[16] = {"trainc", "data", (char *)cmds[cmd], (char *)file, out, "--tokenizer",
                      tok, "--model", model};
    int argc = 9;
    if (flags & 64 && cmd < 2) {
        argv[argc++] = "--unlabeled";
    } else {
        argv[argc++] = "--val-frac";
        argv[argc++] = flags & 32 ? "0.5" : "0";
    }
    if (flags & 64 && cmd == 2) {
        argv[argc++] = "--copies";
        argv[argc++] = "2";
    }
    if (flags & 128 && cmd == 0) {
        argv[argc++] = "--pair";
        argv[argc++] = "hypothesis";
    }
    if (flags & 128 && cmd == 1)
        argv[argc++] = "--all-pieces";
    if (flags & 16 && cmd == 3) {   /* (a dpo model's answers end in the tokenizer's last
                                        special token, [SEP] or </s>) */
        argv[argc++] = "--eos";
        argv[argc++] = flags & 4 ? "</s>" : "[SEP]";
    }
    if (flags & 16 && flags & 128 && !(flags & 64) && cmd == 3) {   /* (kto's) */
        argv[argc++] = "--kl-group";
        argv[argc++] = "3";
    }
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
