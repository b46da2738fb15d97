/* labels.c - see labels.h. The file is kept as it was read, one buffer,
 * with an offset per line: a label costs 8 bytes beyond its text. */
#include "backends/labels.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <utf8proc.h>

struct labels {
    char *text;
    int64_t n;
    size_t *start, *end;    /* label i is text[start[i] .. end[i]) */
};

void labels_free(struct labels *l)
{
    if (!l)
        return;
    free(l->text);
    free(l->start);
    free(l->end);
    free(l);
}

int64_t labels_count(const struct labels *l)
{
    return l ? l->n : 0;
}

const char *labels_get(const struct labels *l, int64_t i, size_t *len)
{
    if (!l || i < 0 || i >= l->n) {
        *len = 0;
        return "";
    }
    *len = l->end[i] - l->start[i];
    return l->text + l->start[i];
}

/* Whether s[0..n) is UTF-8: the answers put labels in JSON strings. */
static bool labels_utf8(const char *s, size_t n)
{
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s;
    while (n > 0) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate(p, (utf8proc_ssize_t)n, &c);
        if (k <= 0)
            return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

int labels_parse(const char *text, size_t len, const char *name, int64_t want,
                 struct labels **out, struct error *err)
{
    *out = NULL;
    /* Lines: a last line without '\n' counts; the '\n' ending the file
     * starts none. */
    int64_t lines = 0;
    for (size_t i = 0; i < len; i++)
        if (text[i] == '\n')
            lines++;
    if (len > 0 && text[len - 1] != '\n')
        lines++;
    if (lines < want)
        return error_set(err, BG_ECONFIG, "%s: %lld label%s, but the output has %lld elements "
                         "per row (one label a line, one line per element)", name,
                         (long long)lines, lines == 1 ? "" : "s", (long long)want);
    int64_t n = want;   /* lines past the output's elements are never asked for */
    struct labels *l = calloc(1, sizeof *l);
    if (l) {
        l->text = malloc(len ? len : 1);
        l->start = malloc((size_t)(n ? n : 1) * sizeof *l->start);
        l->end = malloc((size_t)(n ? n : 1) * sizeof *l->end);
    }
    if (!l || !l->text || !l->start || !l->end) {
        labels_free(l);
        return error_set(err, BG_ENOMEM, "%s: out of memory for %lld labels", name,
                         (long long)n);
    }
    if (len)
        memcpy(l->text, text, len);
    size_t pos = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *nl = memchr(l->text + pos, '\n', len - pos);
        size_t e = nl ? (size_t)(nl - l->text) : len;
        size_t next = nl ? e + 1 : len;
        if (e > pos && l->text[e - 1] == '\r')   /* a file written on Windows */
            e--;
        if (!labels_utf8(l->text + pos, e - pos)) {
            labels_free(l);
            return error_set(err, BG_ECONFIG, "%s: line %lld is not UTF-8 text", name,
                             (long long)i + 1);
        }
        l->start[i] = pos;
        l->end[i] = e;
        pos = next;
    }
    l->n = n;
    *out = l;
    return 0;
}

int labels_load(const char *path, int64_t want, struct labels **out, struct error *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return error_set(err, BG_ECONFIG, "%s: cannot open the labels file: %s", path,
                         strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return error_set(err, BG_ECONFIG, "%s: the labels file is not a regular file", path);
    }
    if ((uint64_t)st.st_size > LABELS_MAX_BYTES) {
        fclose(f);
        return error_set(err, BG_ECONFIG, "%s: %lld bytes; a labels file may have at most %u",
                         path, (long long)st.st_size, LABELS_MAX_BYTES);
    }
    size_t len = (size_t)st.st_size;
    char *text = malloc(len ? len : 1);
    if (!text) {
        fclose(f);
        return error_set(err, BG_ENOMEM, "%s: out of memory", path);
    }
    size_t got = len ? fread(text, 1, len, f) : 0;
    int rerr = ferror(f);
    fclose(f);
    if (got != len || rerr) {
        free(text);
        return error_set(err, BG_ECONFIG, "%s: cannot read the labels file", path);
    }
    int rc = labels_parse(text, len, path, want, out, err);
    free(text);
    return rc;
}
