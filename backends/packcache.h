/* packcache.h - the cpu backend's prepared weights kept on disk, so that a
 * model loaded again (after an unload, an eviction, an idle unload, a
 * restart) maps them back instead of packing them again.
 *
 * Packing (kernels/dense.h) reads every weight and writes it into the
 * kernels' blocked layout: for a 100 MB model that is most of a load. The
 * first load writes the packed layers to <dir>/<model>-<key>.packed; a
 * later load of the same weights file (same inode, size, modification
 * time), the same layers of the config and the same kernels on this CPU
 * (all in the key) maps that file read-only and runs on it where it lies:
 * the load costs what reading the file costs. Any mismatch or damage the
 * header shows makes a plain load (and a new file); a model's older files
 * are removed when a new one is written.
 *
 * The mapping is shared with the page cache, and it goes with the model:
 * unloading unmaps it, so the memory returns as with packed copies. The
 * files belong to batchgate: one truncated while mapped ends the process
 * (SIGBUS), as for any mapped model file. */
#ifndef BG_PACKCACHE_H
#define BG_PACKCACHE_H

#include <stddef.h>

#include "backends/model.h"
#include "common/error.h"
#include "kernels/dtype.h"

struct packcache;

/* The key of a model's packed weights: the weights file's identity, the
 * config's layers (types, tensor names, activations, input width) and the
 * kernels this CPU runs. 0, or -1 when the weights file cannot be stat'ed. */
int packcache_key(const struct model_config *c, const char *weights_path, char key[65]);

/* Maps <dir>/<model>-<key>.packed: 0 and *out, 1 when there is none (or it
 * does not hold c's layers), <0 with err when it is damaged (the caller
 * then packs as if there were none). */
int packcache_open(const char *dir, const struct model_config *c, const char *key,
                   struct packcache **out, struct error *err);
/* Layer i's packed weights and bias; NULL for a layer without weights. */
const void *packcache_layer(const struct packcache *pc, int i, size_t *bytes, enum dtype *wdt,
                            int *out_features, int *in_features, const float **bias);
void packcache_close(struct packcache *pc);

/* One layer to write: its packed weights and bias (NULL w: no weights). */
struct packcache_layer {
    const void *w;
    size_t bytes;
    enum dtype wdt;
    int out_features, in_features;
    const float *bias;                /* [out_features] */
};
/* Writes the file (a temporary, then renamed into place) and removes the
 * model's other ones. */
int packcache_write(const char *dir, const struct model_config *c, const char *key,
                    const struct packcache_layer *layers, int n, struct error *err);

#endif
