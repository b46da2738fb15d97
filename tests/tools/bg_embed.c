/* bg_embed.c - embeds text with an encoder model folder on the cpu backend,
 * without a server: one JSON array of floats per input line. For checking
 * the forward pass against a reference (tests/e2e/test_embeddings.py) and
 * for timing it alone.
 *
 *   bg-embed MODEL_DIR [BATCH [THREADS]] < lines.txt > vectors.jsonl
 *
 * Lines are JSON strings (so any text, newlines included, fits on one). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "backends/backend.h"
#include "backends/encoder.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bg-embed MODEL_DIR [BATCH] < json-string-lines\n");
        return 2;
    }
    const char *dir = argv[1];
    int batch = argc > 2 ? atoi(argv[2]) : 32;
    int threads = argc > 3 ? atoi(argv[3]) : 1;
    const char *slash = strrchr(dir, '/');
    const char *name = slash && slash[1] ? slash + 1 : dir;
    struct model *m = calloc(1, sizeof *m);
    struct error err = {0};
    if (model_config_load(dir, name, &m->cfg, &err) != 0) {
        fprintf(stderr, "bg-embed: %s\n", err.msg);
        return 1;
    }
    m->cfg.backend = MODEL_BACKEND_CPU;
    m->cfg.batching.max_batch_size = batch;
    m->cfg.batching.npreferred = 0;
    m->cfg.instance_threads = threads;
    if (model_load(m, &err) != 0) {
        fprintf(stderr, "bg-embed: %s\n", err.msg);
        return 1;
    }
    int64_t w = m->cfg.input.row_elems, H = m->cfg.output.row_elems;
    struct instance *in = &m->instances[0];
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rows = 0, rc = 0;
    for (;;) {
        len = getline(&line, &cap, stdin);
        if (len > 0) {
            json_error_t je;
            json_t *s = json_loadb(line, (size_t)len, JSON_DECODE_ANY, &je);
            if (!json_is_string(s)) {
                fprintf(stderr, "bg-embed: a line is not a JSON string: %s\n", je.text);
                return 1;
            }
            if (encoder_row_from_text(m, json_string_value(s), json_string_length(s), true,
                                      in->in + rows * w, NULL, &err) != 0) {
                fprintf(stderr, "bg-embed: %s\n", err.msg);
                return 1;
            }
            json_decref(s);
            rows++;
        }
        if (rows == batch || (len <= 0 && rows > 0)) {
            struct backend_io io = {.in = in->in, .out = in->out, .rows = rows};
            if (model_run(in, &io, &err) != 0) {
                fprintf(stderr, "bg-embed: %s\n", err.msg);
                return 1;
            }
            if (m->cfg.encoder.normalize)   /* as the APIs answer by default */
                encoder_output_normalize(in->out, rows, (int)H);
            for (int r = 0; r < rows; r++) {
                putchar('[');
                for (int64_t k = 0; k < H; k++)
                    printf("%s%.9g", k ? "," : "", (double)in->out[r * H + k]);
                puts("]");
            }
            rows = 0;
        }
        if (len <= 0)
            break;
    }
    free(line);
    model_unload(m);
    free(m);
    return rc;
}
