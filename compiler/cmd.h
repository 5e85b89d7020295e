/* cmd.h: trainc's commands (main.c dispatches them; one file each, data's in
 * data_cmd.c, emit's beside build's) and what they share (cmd_common.c). */
#ifndef CMD_H
#define CMD_H

#include "ir.h"

/* Each takes argv[0] = its name, then its arguments; returns the exit status. */
int cmd_check(int argc, char **argv);
int cmd_emit(int argc, char **argv);
int cmd_build(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_data(int argc, char **argv);
int data_sft(int argc, char **argv);     /* data sft (data_sft.c) */
int data_classify(int argc, char **argv);   /* data classify (data_classify.c) */
int data_tags(int argc, char **argv);       /* data tags (data_tags.c) */
int data_mlm(int argc, char **argv);        /* data mlm (data_mlm.c) */
int data_qa(int argc, char **argv);         /* data qa (data_qa.c) */
/* data qa --answers (data_qa_answers.c): the answers PRED.npy's logits pick in FILE's
 * contexts by DIR's PART rows, the N_BEST highest start and end logits a row, at most
 * MAX_ANSWER tokens; V2: SQuAD v2's null answer, "" where its score beats the best's by more
 * than THRESHOLD */
typedef struct DataQaAnswers {
    const char *file, *dir, *pred, *part;
    int64_t n_best, max_answer;
    int v2;
    double threshold;
} DataQaAnswers;
int data_qa_answers(const DataQaAnswers *a);
int data_pairs(int argc, char **argv);      /* data pairs (data_pairs.c) */
int data_images(int argc, char **argv);     /* data images (data_images.c) */
/* image_read.c: an image's 8-bit pixels, rows of w pixels of ch bytes (RGB or L) */
typedef struct ImageU8 {
    uint32_t w, h;
    int ch;
    unsigned char *px;
} ImageU8;
/* PATH's PNG or JPEG as Pillow decodes it (RGB or L, alpha dropped): NULL, or why not */
const char *image_read(const char *path, ImageU8 *im);
/* Image.convert("RGB") (ch 3) or ("L") (ch 1) */
void image_convert(ImageU8 *im, int ch);
/* Pillow's resampling filters, by its numbers (an image processor's "resample") */
enum { IMAGE_LANCZOS = 1, IMAGE_BILINEAR = 2, IMAGE_BICUBIC = 3, IMAGE_BOX = 4, IMAGE_HAMMING = 5 };
/* Image.resize((W, H), FILTER) */
void image_resize(ImageU8 *im, int W, int H, int filter);
/* transformers' center_crop to W x H (zeros around an image smaller than that) */
void image_center_crop(ImageU8 *im, int W, int H);
/* The data commands' outputs: written under data_stage(FINAL)'s name (FINAL.part), all
 * renamed to their names by data_commit once complete; removed at exit before it, or by
 * data_abandon (the fuzz targets, after an input that exited). */
const char *data_stage(const char *final);
void data_commit(void);

/* data_rows.c: FILE:LINE: error: MESSAGE, exit 1 (the .part files are removed at exit) */
_Noreturn void data_line_error(const char *file, int64_t ln, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* --val-frac's value V of data command CMD: a number in [0, 0.5], or exit 1 */
double data_val_frac(const char *cmd, const char *v);
/* Option FLAG's value V of data command CMD as a number in [lo, hi], or exit 1 */
double data_number_arg(const char *cmd, const char *flag, const char *v, double lo, double hi);
/* the same for a count: a whole number in [lo, hi] */
int64_t data_count_arg(const char *cmd, const char *flag, const char *v, int64_t lo, int64_t hi);
/* An argument S of data command CMD that is no option it knows: -h (USAGE, exit 0), an
 * unknown option (exit 1), else the input FILE, then the output DIR */
void data_positional(const char *cmd, const char *usage, const char *s, const char **file,
                     const char **dir);
/* FILE's examples: its lines that are not blank (none: exit 1, saying each is FORM) */
int64_t data_count_lines(const char *file, const char *form);
/* The first byte of character k (Python's index: UTF-8 sequences counted) of s[0, n), n
 * for k at its end, -1 past it */
int64_t data_char_byte(const char *s, int64_t n, int64_t k);
/* A JSON-lines file read an object at a time: data_lines_next gives the next non-blank
 * line's object (ln its line number), NULL at the end; a line that is not an object exits
 * 1 naming FILE:LINE and saying each line is FORM */
typedef struct DataLines {
    const char *file, *form;
    FILE *f;
    char *line;
    size_t cap;
    int64_t ln;
} DataLines;
void data_lines_open(DataLines *r, const char *file, const char *form);
cJSON *data_lines_next(DataLines *r);
void data_lines_close(DataLines *r);
/* Arrays of i32 rows (width values each; 0: one, an array [rows]) streamed to
 * DIR/NAME_KEY.npy (staged), the headers written by data_rows_close */
enum { DATA_ROWS_MAX = 6 };
typedef struct DataRows {
    const char *name;          /* "train" or "val" */
    int n;                     /* arrays, at most DATA_ROWS_MAX */
    char *path[DATA_ROWS_MAX]; /* the .part files */
    FILE *f[DATA_ROWS_MAX];
    int64_t width[DATA_ROWS_MAX];
    int64_t rows;
} DataRows;
void data_rows_open(DataRows *o, const char *dir, const char *name, int n,
                    const char *const *keys, const int64_t *widths);
/* one row of each array: rows[k] holds width[k] values (1 for width 0) */
void data_rows_put(DataRows *o, const int32_t *const *rows);
void data_rows_close(DataRows *o);
/* data_classify.c: what an imported text classifier's (or masked LM's) model.json says
 * its rows are (T, the classes and their names, whether it reads token types, its kind);
 * one of another kind (data classify's a class for each text, y []; data tags' one for
 * each token, y [T]; data mlm's a masked LM, y [T] and a head tied to the embedding) or
 * without positions exits 1 naming the command that takes it */
enum { CLS_TEXT, CLS_TOKENS, CLS_MLM, CLS_LM, CLS_PAIRS, CLS_DPO, CLS_QA };
typedef struct ClsModel {
    int64_t T, K;
    char **names;              /* K names, or NULL */
    int types, kind;
    int left;                  /* padded on the left: a decoder's classifier (last_token) */
    char *sft;                 /* an orpo model's sft_target input (data pairs), or NULL */
    char *label;               /* a kto model's label input (data pairs), or NULL */
} ClsModel;
ClsModel data_cls_model(const char *path, int kind);
/* The tokenizer at TOK, with room in the model's rows for a token past its special ones
 * (PAIR: a pair's); CMD names the command in errors */
struct rt_tokenizer *data_cls_tokenizer(const char *cmd, const char *tok, const ClsModel *cm,
                                        int pair);
/* Index KEY's value V at line ln as a class: a name among the model's, or an integer in
 * [0, K) */
int32_t data_cls_class(const ClsModel *cm, const cJSON *v, const char *key, const char *file,
                       int64_t ln);
/* The examples' split: FILE's (one a non-blank line of the FORM it names in errors), the
 * last FRAC of them for validation (none with --val or --unlabeled), VAL's; DIR made */
typedef struct ClsSplit {
    int64_t n, n_val, n_valfile;
} ClsSplit;
ClsSplit data_cls_split(const char *file, const char *val, double frac, int unlabeled,
                        const char *dir, const char *form);
/* The rows written: open makes NAME's arrays ("train", or "test" when unlabeled, and "val"
 * where the split has validation), encode writes FILE's first n_train examples to tr and
 * the rest to va (FILE's, then VAL's); then all closed, for the caller to commit
 * (data_commit) once it finds them right */
typedef struct ClsWrite {
    void (*open)(void *ctx, DataRows *o, const char *name);
    void (*encode)(void *ctx, const char *file, int64_t n_train, DataRows *tr, DataRows *va);
    void *ctx;
} ClsWrite;
void data_cls_write(const ClsWrite *w, const char *file, const char *val, int unlabeled,
                    const ClsSplit *sp, DataRows *tr, DataRows *va);
/* DIR/NAME_{x,types,pos}.npy [N, T] (types where the model reads them), then N EXTRA
 * arrays of shape EXTRA_T (0: one value a row) named by EXTRA */
void data_cls_rows(DataRows *o, const char *dir, const ClsModel *cm, const char *name, int n,
                   const char *const *extra, const int64_t *extra_t);
/* A text's IDS and TYPES (rt_ids, the template applied; at most T of them) placed in a row
 * of T: x, type ids (0 for the padding) and positions (the text's from 0, the padding a
 * sequence of its own), the padding (PAD) after the text or before it (LEFT) */
struct rt_ids;
void data_cls_place(const struct rt_ids *ids, const struct rt_ids *types, int64_t T, int32_t pad,
                    int left, int32_t *x, int32_t *ty, int32_t *pos);
void data_abandon(void);

int cmd_import(int argc, char **argv);   /* import hf (cmd_import.c) */
int cmd_export(int argc, char **argv);   /* export hf (cmd_export.c) */
int cmd_help(int argc, char **argv);
void usage(FILE *f);   /* trainc's usage: commands and their arguments */

/* SPEC... at argv[i..]: one or two files, the arguments before the first option (any
 * name: a spec need not end in .json). Returns how many. */
int spec_args(int argc, char **argv, int i, const char *cmd);
/* The spec of argv[at .. at + n), with the --set options after it applied when
 * allow_sets (the type keys first). */
Spec *load_with_sets(int argc, char **argv, int at, int n, int allow_sets);
/* An option's value: the next argument, which must not be an option itself. */
const char *opt_value(int argc, char **argv, int *i, const char *name);
/* An argument cmd does not take: exit 1, with the closest option of its own or the
 * command that has it. */
_Noreturn void unknown_arg(const char *cmd, const char *arg);
/* path could not be written: exit 1 where the path is at fault, 2 otherwise. */
_Noreturn void cannot_write(const char *cmd, const char *path);
/* Where the runtime lives: installed (PREFIX/lib/trainc) or the build tree. */
const char *trainc_home_include(void);  /* folder of trainc_rt.h */
const char *trainc_home_lib(void);      /* folder of librt.a */

#endif
