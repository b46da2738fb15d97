/* packcache.c - see packcache.h. The file: a header, one record per config
 * layer, then each layer's packed weights at a page-aligned offset (so the
 * mapping keeps the kernels' alignment) followed by its bias. */
#include "backends/packcache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sha256.h"
#include "kernels/kernels.h"

#define PACK_MAGIC "BGPACK1"
#define PACK_PAGE 4096

struct pack_header {
    char magic[8];
    char key[64];
    uint32_t nlayers;
    uint32_t pad;
};

struct pack_record {
    int32_t has_weights;
    int32_t wdt;
    int32_t out_features, in_features;
    uint64_t offset, bytes;           /* the packed weights */
    uint64_t bias_offset;             /* out_features floats */
};

struct packcache {
    unsigned char *map;
    size_t len;
    int n;
    const struct pack_record *rec;
};

int packcache_key(const struct model_config *c, const char *weights_path, char key[65])
{
    struct stat st;
    if (stat(weights_path, &st) != 0)
        return -1;
    struct sha256 h;
    sha256_init(&h);
    char buf[512];
    int len = snprintf(buf, sizeof buf, "v1 %s dev=%llu ino=%llu size=%lld mtime=%lld.%09ld in=%lld "
                       "isa=%s", c->name, (unsigned long long)st.st_dev,
                       (unsigned long long)st.st_ino, (long long)st.st_size,
                       (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                       (long long)c->input.row_elems, kernels_isa_name(kernels_isa_best()));
    sha256_update(&h, buf, (size_t)len);
    for (int i = 0; i < c->nlayers; i++) {
        const struct model_layer *ly = &c->layers[i];
        /* Names are NUL-separated so that no two lists hash alike. */
        sha256_update(&h, &ly->type, sizeof ly->type);
        sha256_update(&h, ly->weight, strlen(ly->weight) + 1);
        sha256_update(&h, ly->bias, strlen(ly->bias) + 1);
    }
    uint8_t d[SHA256_DIGEST_LEN];
    sha256_final(&h, d);
    sha256_hex(d, key);
    return 0;
}

static void packcache_path(char *out, size_t cap, const char *dir, const char *model,
                           const char *key)
{
    snprintf(out, cap, "%s/%s-%.32s.packed", dir, model, key);
}

int packcache_open(const char *dir, const struct model_config *c, const char *key,
                   struct packcache **out, struct error *err)
{
    char path[8400];
    packcache_path(path, sizeof path, dir, c->name, key);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 1;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(struct pack_header)) {
        close(fd);
        return error_set(err, BG_EIO, "%s: too short for its header", path);
    }
    size_t len = (size_t)st.st_size;
    /* Populated: the kernels read every page of it on the first batch. */
    unsigned char *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return error_set(err, BG_EIO, "%s: cannot map it: %s", path, strerror(errno));
    const struct pack_header *h = (const void *)map;
    const char *bad = NULL;
    size_t recs_end = sizeof *h + (size_t)h->nlayers * sizeof(struct pack_record);
    if (memcmp(h->magic, PACK_MAGIC, sizeof PACK_MAGIC) != 0 || memcmp(h->key, key, 64) != 0)
        bad = "not a packed-weights file of this key";
    else if ((int)h->nlayers != c->nlayers || recs_end > len)
        bad = "its layer count does not match";
    const struct pack_record *rec = (const void *)(map + sizeof *h);
    for (int i = 0; !bad && i < c->nlayers; i++) {
        const struct pack_record *r = &rec[i];
        if (!r->has_weights)
            continue;
        if (r->offset % PACK_PAGE || r->offset > len || r->bytes > len - r->offset ||
            r->bias_offset > len || r->out_features < 1 || r->in_features < 1 ||
            (uint64_t)r->out_features * sizeof(float) > len - r->bias_offset ||
            r->bias_offset % sizeof(float))
            bad = "a layer's weights lie outside the file";
    }
    if (bad) {
        munmap(map, len);
        return error_set(err, BG_EIO, "%s: %s", path, bad);
    }
    struct packcache *pc = calloc(1, sizeof *pc);
    if (!pc) {
        munmap(map, len);
        return error_set(err, BG_ENOMEM, "out of memory");
    }
    *pc = (struct packcache){map, len, c->nlayers, rec};
    *out = pc;
    return 0;
}

const void *packcache_layer(const struct packcache *pc, int i, size_t *bytes, enum dtype *wdt,
                            int *out_features, int *in_features, const float **bias)
{
    if (i < 0 || i >= pc->n || !pc->rec[i].has_weights)
        return NULL;
    const struct pack_record *r = &pc->rec[i];
    *bytes = (size_t)r->bytes;
    *wdt = (enum dtype)r->wdt;
    *out_features = r->out_features;
    *in_features = r->in_features;
    *bias = (const float *)(pc->map + r->bias_offset);
    return pc->map + r->offset;
}

void packcache_close(struct packcache *pc)
{
    if (!pc)
        return;
    munmap(pc->map, pc->len);
    free(pc);
}

static int packcache_write_all(int fd, const void *p, size_t n)
{
    const unsigned char *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Removes <dir>/<model>-*.packed (and leftover temporaries) but `keep`. */
static void packcache_prune(const char *dir, const char *model, const char *keep)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    size_t ml = strlen(model);
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *n = de->d_name;
        size_t nl = strlen(n);
        if (strncmp(n, model, ml) != 0 || n[ml] != '-' || strcmp(n, keep) == 0 ||
            nl != ml + 1 + 32 + (strstr(n, ".tmp") ? 11 : 7))
            continue;   /* not one of this model's (another model's name may start alike) */
        char path[8400];
        snprintf(path, sizeof path, "%s/%s", dir, n);
        unlink(path);
    }
    closedir(d);
}

int packcache_write(const char *dir, const struct model_config *c, const char *key,
                    const struct packcache_layer *layers, int n, struct error *err)
{
    /* The state folder, then its packed/ folder: made here on first use. */
    char parent[4200];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = '\0';
        mkdir(parent, 0755);
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return error_set(err, BG_EIO, "%s: cannot make it: %s", dir, strerror(errno));
    char path[8400], tmp[8410];
    packcache_path(path, sizeof path, dir, c->name, key);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    struct pack_header h = {.nlayers = (uint32_t)n};
    memcpy(h.magic, PACK_MAGIC, sizeof PACK_MAGIC);
    memcpy(h.key, key, 64);
    struct pack_record *rec = calloc((size_t)(n ? n : 1), sizeof *rec);
    if (!rec)
        return error_set(err, BG_ENOMEM, "out of memory");
    uint64_t off = sizeof h + (uint64_t)n * sizeof *rec;
    for (int i = 0; i < n; i++) {
        if (!layers[i].w)
            continue;
        off = (off + PACK_PAGE - 1) / PACK_PAGE * PACK_PAGE;
        rec[i] = (struct pack_record){1, (int32_t)layers[i].wdt, layers[i].out_features,
                                      layers[i].in_features, off, layers[i].bytes, 0};
        off += layers[i].bytes;
        rec[i].bias_offset = off;
        off += (uint64_t)layers[i].out_features * sizeof(float);
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = fd < 0 || packcache_write_all(fd, &h, sizeof h) ||
             packcache_write_all(fd, rec, (size_t)n * sizeof *rec);
    uint64_t at = sizeof h + (uint64_t)n * sizeof *rec;
    static const unsigned char zeros[PACK_PAGE];
    for (int i = 0; i < n && !rc; i++) {
        if (!layers[i].w)
            continue;
        if (rec[i].offset > at)
            rc = packcache_write_all(fd, zeros, (size_t)(rec[i].offset - at));
        rc = rc || packcache_write_all(fd, layers[i].w, layers[i].bytes) ||
             packcache_write_all(fd, layers[i].bias,
                                 (size_t)layers[i].out_features * sizeof(float));
        at = rec[i].bias_offset + (uint64_t)layers[i].out_features * sizeof(float);
    }
    int e = errno;
    free(rec);
    if (fd >= 0 && close(fd) != 0 && !rc) {
        rc = 1;
        e = errno;
    }
    if (rc || rename(tmp, path) != 0) {
        if (!rc)
            e = errno;
        unlink(tmp);
        return error_set(err, BG_EIO, "%s: cannot write it: %s", path, strerror(e));
    }
    packcache_prune(dir, c->name, strrchr(path, '/') + 1);
    return 0;
}
