/* spec_train.c: the training spec ("train", docs/spec.md) read into a Spec's
 * rt_train_config, and checked against the model.
 *
 * Each key's value goes through the runtime's config table (runtime/config.c), so the
 * compiler and a trainer's --set take the same values; this file walks the JSON object,
 * remembers where each key came from (for the cross-field rules' errors), and adds the
 * rules that need the model: token data against two i32 windows, data files against
 * the inputs, augmentation against image inputs, loader.mask against ids and their
 * target, a GAN's and loader.documents' limits.
 * spec.c reads the model and holds the entry points; spec_read.h the shared helpers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ops/op.h"
#include "spec_read.h"

/* An i32 input of shape [T] (a token window's), or not (-1: none) */
static int window_input(const Spec *s, int k, int64_t T)
{
    return k >= 0 && s->inputs[k].dtype == RT_I32 && s->inputs[k].rank == 1 &&
           s->inputs[k].shape[0] == T;
}

/* Token data against the model: two i32 inputs of shape [T] (the tokens, the next
 * tokens), and with the model's positions those too, which loader.documents fills from
 * each window (runtime/data.c's tokens_inputs; check_documents). 0, or -1 with a
 * message. */
static int check_token_inputs(const Spec *s, char *err, size_t errlen)
{
    int64_t T = s->inputs[0].shape[0];
    int p = s->positions ? sp_find_input(s, s->positions) : -1;
    int y = p == 1 ? 2 : 1;
    if (s->n_inputs != (p >= 0 ? 3 : 2) || !window_input(s, 0, T) || !window_input(s, y, T) ||
        (p >= 0 && !window_input(s, p, T))) {
        snprintf(err, errlen, "token data needs a model with two i32 inputs of shape [T] (the "
                 "tokens and the next tokens)%s", p >= 0 ? ", and its positions, i32 [T] too" : "");
        return -1;
    }
    return 0;
}

/* The data entries against the model: names are inputs (or "tokens", alone, for a
 * model with two i32 inputs of shape [T], and its positions) and every input has a
 * file. Returns 0, or -1 with a message. */
static int check_data(const Spec *s, const rt_data_entry *e, int n, const char *what,
                      char *err, size_t errlen)
{
    int tokens = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(e[i].key, "tokens")) {
            tokens = 1;
            continue;
        }
        if (sp_find_input(s, e[i].key) < 0) {
            const char **names = sp_input_names(s, 1);
            const char *near = rt_closest(e[i].key, names);
            if (near)
                snprintf(err, errlen, "unknown input '%s' in data.%s; did you mean '%s'?",
                         e[i].key, what, near);
            else
                snprintf(err, errlen, "unknown input '%s' in data.%s; the model's inputs "
                         "are %s (or tokens, for token shards)", e[i].key, what,
                         sp_join(sp_input_names(s, 0)));
            return -1;
        }
    }
    if (tokens) {
        if (n != 1) {
            snprintf(err, errlen, "data.%s.tokens must be the only entry of data.%s", what,
                     what);
            return -1;
        }
        return check_token_inputs(s, err, errlen);
    }
    for (int i = 0; i < s->n_inputs; i++) {
        int found = 0;
        for (int j = 0; j < n; j++)
            found |= !strcmp(e[j].key, s->inputs[i].name);
        if (!found) {
            snprintf(err, errlen, "data.%s has no file for input '%s'", what,
                     s->inputs[i].name);
            return -1;
        }
    }
    return 0;
}

/* Rules between the model and the training spec. */
/* loader.augment crops and flips the image inputs ([C, H, W]); its padding (the loader
 * moves raw values, and pads with raw 0s) is 0 after scale and shift where the shift is
 * 0, which "fill": "zero" needs; "raw" takes the raw 0 (a flip alone pads nothing);
 * random_resized_crop resamples u8 values (any scale and shift: it pads nothing) */
static int check_augment(const Spec *s, char *err, size_t errlen, char *key, size_t keylen)
{
    int images = 0;
    for (int k = 0; k < s->n_inputs; k++) {
        const InputSpec *in = &s->inputs[k];
        if (in->rank != 3)
            continue;
        images++;
        double shift = in->shift;
        for (int64_t c = 0; in->ch_shift && c < in->shape[0]; c++)
            if (in->ch_shift[c] != 0)
                shift = in->ch_shift[c];
        const rt_train_config *t = &s->train;
        if (t->has_rrc && in->dtype != RT_U8) {
            snprintf(key, keylen, "loader.augment.random_resized_crop");
            snprintf(err, errlen, "random_resized_crop resamples 8-bit images (Pillow's "
                     "bilinear on u8 bands), and input '%s' is %s: give it as u8", in->name,
                     rt_dtype_name(in->dtype));
            return -1;
        }
        if (t->has_jitter && (in->dtype != RT_U8 || (in->shape[0] != 1 && in->shape[0] != 3))) {
            snprintf(key, keylen, "loader.augment.color_jitter");
            snprintf(err, errlen, "color_jitter works on 8-bit images of 1 or 3 channels "
                     "(Pillow's L and RGB), and input '%s' is %s [%lld, ...]", in->name,
                     rt_dtype_name(in->dtype), (long long)in->shape[0]);
            return -1;
        }
        if (shift != 0 && t->has_crop && t->crop_padding > 0 && t->crop_fill == 0) {
            snprintf(key, keylen, "loader.augment.random_crop");
            snprintf(err, errlen, "random_crop pads with zeros after scale and shift, and "
                     "input '%s' has shift %g: the loader moves its raw values, so that takes "
                     "a shift of 0; \"fill\": \"raw\" pads with raw 0s instead (black pixels, "
                     "as torchvision's RandomCrop before Normalize)", in->name, shift);
            return -1;
        }
    }
    if (!images) {
        snprintf(key, keylen, "loader.augment");
        snprintf(err, errlen, "loader.augment crops and flips image inputs [C, H, W]; the "
                 "model has none");
        return -1;
    }
    return 0;
}

/* loader.mask masks a row of ids (its input: integers [T]) against the loss's target
 * ([T], with an ignore_index); the trainer checks the ids against the embedding
 * (runtime/setup.c's mask_rule). */
static int check_mask(const Spec *s, char *err, size_t errlen, char *key, size_t keylen)
{
    const rt_train_config *t = &s->train;
    int in = sp_find_input(s, t->mask_input), tgt = sp_find_input(s, t->mask_target);
    int ids = in >= 0 && s->inputs[in].rank == 1 && s->inputs[in].dtype != RT_F32;
    int target = tgt >= 0 && ids && s->inputs[tgt].rank == 1 &&
                 s->inputs[tgt].shape[0] == s->inputs[in].shape[0] &&
                 s->loss == LOSS_CROSS_ENTROPY && !strcmp(s->loss_target, t->mask_target) &&
                 s->has_ignore;
    if (in < 0 || tgt < 0)
        snprintf(err, errlen, "the model has no input '%s'",
                 in < 0 ? t->mask_input : t->mask_target);
    else if (!ids)
        snprintf(err, errlen, "'%s' is not a row of ids ([T] integers)", t->mask_input);
    else if (!target)
        snprintf(err, errlen, "'%s' is not the cross_entropy target of [%lld] with an "
                 "ignore_index, as '%s' needs", t->mask_target,
                 (long long)s->inputs[in].shape[0], t->mask_input);
    else
        return 0;
    snprintf(key, keylen, "loader.mask.%s",
             in < 0 || (tgt >= 0 && !ids) ? "input" : "target");
    return -1;
}

/* What a GAN's training cannot have (docs/spec.md, "GANs"): 0, or -1 with the key. */
static int check_gan_train(const Spec *s, char *err, size_t errlen, char *key, size_t keylen)
{
    const rt_train_config *t = &s->train;
    const char *k = NULL, *why = NULL;
    if (!s->gan && t->has_opt_d)
        k = "optimizer_d", why = "optimizer_d is a GAN discriminator's optimizer; this model "
                                 "has layers, not \"gan\"";
    else if (!s->gan)
        return 0;
    else if (t->n_val)
        k = "data.val", why = "a GAN has no validation loss: give data.train only";
    else if (t->has_early_stopping)
        k = "early_stopping", why = "a GAN has no validation to stop on: remove early_stopping";
    else if (t->dist != RT_DIST_DDP)
        k = "distributed.strategy", why = "a GAN trains with the ddp strategy (ZeRO does not "
                                          "shard two optimizers yet)";
    else if (t->has_lora)
        k = "lora", why = "a GAN trains all of both networks (lora does not reach them yet)";
    else if (t->opt == RT_OPT_MUON)
        k = "optimizer.type", why = "a GAN's optimizers are adamw or sgd (muon does not train "
                                    "two networks yet)";
    else if (t->has_swa)
        k = "swa", why = "swa averages one network's weights under one optimizer (as "
                         "Lightning's callback); a GAN has two";
    if (!k)
        return 0;
    snprintf(key, keylen, "%s", k);
    snprintf(err, errlen, "%s", why);
    return -1;
}

/* loader.documents: given exactly where the model reads positions from token data
 * (runtime/data.c's tokens_inputs says the same) */
static int check_documents(const Spec *s, char *err, size_t errlen, char *key, size_t keylen)
{
    const rt_train_config *t = &s->train;
    int tokens = t->n_train == 1 && !strcmp(t->train[0].key, "tokens");
    snprintf(key, keylen, "loader.documents");
    if (tokens && s->positions && t->documents < 0)
        snprintf(err, errlen, "token shards hold no positions, and the model reads them "
                 "(\"positions\": \"%s\"): set loader.documents to the token that begins each "
                 "document (attention then stays inside documents), or read .npy data (trainc "
                 "data sft --pack writes them)", s->positions);
    else if (t->documents >= 0 && !s->positions)
        snprintf(err, errlen, "loader.documents fills the model's positions input, and the "
                 "model has none (\"positions\": \"pos\" and an i32 input pos of shape [T])");
    else if (t->documents >= 0 && !tokens)
        snprintf(err, errlen, "loader.documents fills the positions of token data "
                 "(data.train.tokens); .npy data bring their own");
    else
        return 0;
    return -1;
}

/* The training spec against the model: its data, augmentation, a GAN's and documents'
 * rules. 0, or -1 with the message in err and the key it blames in key. */
int check_train_vs_model(const Spec *s, char *err, size_t errlen, char *key, size_t keylen)
{
    const rt_train_config *t = &s->train;
    if (check_gan_train(s, err, errlen, key, keylen))
        return -1;
    if (check_data(s, t->train, t->n_train, "train", err, errlen)) {
        snprintf(key, keylen, "data.train");
        return -1;
    }
    if (t->n_val && check_data(s, t->val, t->n_val, "val", err, errlen)) {
        snprintf(key, keylen, "data.val");
        return -1;
    }
    if (check_documents(s, err, errlen, key, keylen))
        return -1;
    if (t->has_early_stopping && t->es_monitor == RT_MON_VAL_ACC &&
        s->loss != LOSS_CROSS_ENTROPY && s->loss != LOSS_DPO) {
        snprintf(key, keylen, "early_stopping.monitor");
        snprintf(err, errlen, "early_stopping.monitor val_acc needs a cross_entropy or dpo loss");
        return -1;
    }
    if (t->has_mask && check_mask(s, err, errlen, key, keylen))
        return -1;
    if (t->has_augment)
        return check_augment(s, err, errlen, key, keylen);
    return 0;
}

static void add_key_path(const Ctx *c, const char *key, const char *path)
{
    KeyPaths *k = c->keys;
    if (!k)
        return;
    if (k->n == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 32;
        KeyPath *v = xcalloc((size_t)k->cap, sizeof *v);
        if (k->n)
            memcpy(v, k->v, (size_t)k->n * sizeof *v);
        free(k->v);
        k->v = v;
    }
    k->v[k->n++] = (KeyPath){xstrdup(key), xstrdup(path)};
}

/* The spec path of a training key a rule blames: the key's own place in the file, or
 * its section's when the file left the key out, else $.train. */
static const char *train_path(const Ctx *c, const char *key)
{
    char k[256];
    snprintf(k, sizeof k, "%s", key);
    while (*k) {
        for (int i = 0; i < c->keys->n; i++)
            if (!strcmp(c->keys->v[i].key, k))
                return c->keys->v[i].path;
        char *dot = strrchr(k, '.');
        if (!dot)
            break;
        *dot = 0;
    }
    return "$.train";
}

static void set_or_fail(const Ctx *c, const char *key, int jtype, const char *value,
                        const char *path)
{
    char err[512];
    if (rt_config_set_typed(&c->s->train, key, jtype, value, err, sizeof err))
        error_at(c->file, path, "%s", err);
}

static void parse_data_files(const Ctx *c, const cJSON *v, const char *path, const char *what)
{
    char b[300];
    if (cJSON_IsNull(v) && !strcmp(what, "val")) {
        set_or_fail(c, "data.val", 'z', "null", path);
        return;
    }
    if (!cJSON_IsObject(v))
        error_at(c->file, path, "expected an object mapping input names to files, got %s",
                 sp_got(v, b, sizeof b));
    char *dk = xasprintf("data.%s", what);
    add_key_path(c, dk, path);
    free(dk);
    const cJSON *ch;
    cJSON_ArrayForEach(ch, v) {
        char *ep = sp_path_key(path, ch->string);
        if (strcmp(ch->string, "tokens") && sp_find_input(c->s, ch->string) < 0) {
            char *hint = sp_keep(xasprintf("the model's inputs are %s (or tokens, for token "
                                           "shards)", sp_join(sp_input_names(c->s, 0))));
            sp_unknown(c, ep, "input", ch->string, sp_input_names(c->s, 1), hint);
        }
        char *key = xasprintf("data.%s.%s", what, ch->string);
        if (!cJSON_IsString(ch))
            error_at(c->file, ep, "expected a file path, got %s", sp_got(ch, b, sizeof b));
        set_or_fail(c, key, 's', ch->valuestring, ep);
        add_key_path(c, key, ep);
        free(key);
        free(ep);
    }
    char err[512];
    rt_train_config *t = &c->s->train;
    int is_val = !strcmp(what, "val");
    if (check_data(c->s, is_val ? t->val : t->train, is_val ? t->n_val : t->n_train, what,
                   err, sizeof err)) {
        error_at(c->file, path, "%s", err);
    }
}

static void parse_data(const Ctx *c, const cJSON *v, const char *path)
{
    static const char *const keys[] = {"train", "val", NULL};
    sp_need_object(c, v, path, "an object {\"train\": {...}, \"val\": {...}}");
    sp_check_keys(c, v, path, keys);
    char *tp = sp_path_key(path, "train");
    parse_data_files(c, sp_require(c, v, path, "train"), tp, "train");
    free(tp);
    const cJSON *val = sp_member(v, "val");
    if (val) {
        char *vp = sp_path_key(path, "val");
        parse_data_files(c, val, vp, "val");
        free(vp);
    }
}

/* What the config table knows about a dotted key: 1 a value, 2 an object holding
 * values, 3 both (a section that may be null). */
static int key_kind(const char *full)
{
    size_t n = strlen(full);
    int kind = 0;
    for (int i = 0; rt_config_keys[i]; i++) {
        if (!strcmp(rt_config_keys[i], full))
            kind |= 1;
        else if (!strncmp(rt_config_keys[i], full, n) && rt_config_keys[i][n] == '.')
            kind |= 2;
    }
    return kind;
}

/* The keys one level below `prefix` ("" = the top), for suggestions. */
static const char **child_keys(const char *prefix)
{
    int cap = 8;
    for (int i = 0; rt_config_keys[i]; i++)
        cap++;
    const char **w = sp_keep(xcalloc((size_t)cap, sizeof *w));
    int n = 0;
    size_t pn = strlen(prefix);
    if (!pn)
        w[n++] = "data";
    for (int i = 0; rt_config_keys[i]; i++) {
        const char *k = rt_config_keys[i];
        if (pn && (strncmp(k, prefix, pn) || k[pn] != '.'))
            continue;
        if (!pn && !strncmp(k, "data.", 5))
            continue;
        const char *rest = pn ? k + pn + 1 : k;
        size_t len = strcspn(rest, ".");
        char *word = xasprintf("%.*s", (int)len, rest);
        if (sp_in_list(word, w))
            free(word);
        else
            w[n++] = sp_keep(word);
    }
    return w;
}

/* Renders a JSON scalar (or array of scalars) as the text rt_config_set takes. */
static char *render(const cJSON *v, int *jtype)
{
    if (cJSON_IsNumber(v)) {
        *jtype = 'n';
        char buf[64];
        sp_fmt_number(buf, sizeof buf, v->valuedouble);
        return xstrdup(buf);
    }
    if (cJSON_IsString(v)) {
        *jtype = 's';
        return xstrdup(v->valuestring);
    }
    if (cJSON_IsBool(v)) {
        *jtype = 'b';
        return xstrdup(cJSON_IsTrue(v) ? "true" : "false");
    }
    if (cJSON_IsNull(v)) {
        *jtype = 'z';
        return xstrdup("null");
    }
    if (cJSON_IsArray(v)) {
        /* [0.9, 0.999] -> "0.9,0.999"; anything but numbers keeps its JSON form, so
         * that it fails to parse as a number */
        *jtype = 'a';
        char *s = xstrdup("");
        const cJSON *ch;
        cJSON_ArrayForEach(ch, v) {
            char *item;
            if (cJSON_IsNumber(ch)) {
                int t;
                item = render(ch, &t);
            } else {
                char *p = cJSON_PrintUnformatted(ch);
                item = xstrdup(p ? p : "?");
                cJSON_free(p);
            }
            char *joined = xasprintf("%s%s%s", s, *s || ch != v->child ? "," : "", item);
            free(s);
            free(item);
            s = joined;
        }
        return s;
    }
    *jtype = 'o';
    return xstrdup("{}");
}

static void walk_train(const Ctx *c, const cJSON *obj, const char *prefix, const char *path)
{
    /* "type" first: a new optimizer type resets that optimizer's other fields */
    const cJSON *type = sp_member(obj, "type");
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *ch;
        cJSON_ArrayForEach(ch, obj) {
            if ((pass == 0) != (ch == type))
                continue;
            char *cp = sp_path_key(path, ch->string);
            if (!*prefix && !strcmp(ch->string, "data")) {
                parse_data(c, ch, cp);
                free(cp);
                continue;
            }
            char *full = *prefix ? xasprintf("%s.%s", prefix, ch->string)
                                 : xstrdup(ch->string);
            int kind = strchr(ch->string, '.') ? 0 : key_kind(full);
            if (!kind) {
                const char **words = child_keys(prefix);
                /* a key of another section: "lr" for optimizer.lr */
                const char *other =
                    sp_alias_of(ch->string, words) || rt_closest(ch->string, words)
                           ? NULL : rt_closest(full, rt_config_keys);
                free(full);   /* sp_unknown() exits; nothing may look leaked under LSan */
                if (other && strncmp(other, "data.", 5))
                    error_at(c->file, cp, "unknown key '%s'; did you mean '%s'?",
                             sp_show(ch->string), other);
                sp_unknown(c, cp, "key", ch->string, words, NULL);
            }
            char b[300];
            add_key_path(c, full, cp);
            if (cJSON_IsObject(ch) && (kind & 2)) {
                if (kind & 1)
                    set_or_fail(c, full, 'o', "{}", cp);
                walk_train(c, ch, full, cp);
            } else if (kind & 1) {
                int jtype;
                char *text = render(ch, &jtype);
                set_or_fail(c, full, jtype, text, cp);
                free(text);
            } else
                error_at(c->file, cp, "expected an object, got %s", sp_got(ch, b, sizeof b));
            free(full);
            free(cp);
        }
    }
}

void parse_train(const Ctx *c, const cJSON *t)
{
    rt_config_defaults(&c->s->train);
    sp_need_object(c, t, "$.train", "an object");
    if (!sp_member(t, "data"))
        error_at(c->file, "$.train", "missing key 'data' (the files to train on)");
    walk_train(c, t, "", "$.train");
    char err[512], key[256] = "";
    if (rt_config_check(&c->s->train, err, sizeof err, key, sizeof key) ||
        check_train_vs_model(c->s, err, sizeof err, key, sizeof key))
        error_at(c->file, train_path(c, key), "%s", err);
    for (int i = 0; i < c->keys->n; i++) {
        free(c->keys->v[i].key);
        free(c->keys->v[i].path);
    }
    free(c->keys->v);
    *c->keys = (KeyPaths){0};
}
