/* shmreg.c - see shmreg.h. */
#include "gateway/shmreg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/list.h"
#include "serving/tensor_json.h"

struct shmreg_region {
    struct list link;                 /* on the registry while registered */
    _Atomic int refs;                 /* the registry's (while registered) + each user's */
    char name[SHMREG_NAME_MAX];
    char key[SHMREG_KEY_MAX];
    uint64_t offset, byte_size;       /* as registered: the window in the object */
    void *map;                        /* mmap's address: `offset` rounded down to a page */
    size_t map_len;
    unsigned char *base;              /* the region's byte 0 (map + offset's rest) */
};

struct shmreg {
    pthread_mutex_t mu;
    struct list regions;              /* registration order: status lists them so */
    int n;                            /* in the list */
};

struct shmreg *shmreg_new(void)
{
    struct shmreg *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    pthread_mutex_init(&r->mu, NULL);
    list_init(&r->regions);
    return r;
}

static void shmreg_region_unmap(struct shmreg_region *g)
{
    munmap(g->map, g->map_len);
    free(g);
}

void shmreg_release(struct shmreg_region *g)
{
    if (g && atomic_fetch_sub(&g->refs, 1) == 1)
        shmreg_region_unmap(g);
}

void shmreg_free(struct shmreg *r)
{
    if (!r)
        return;
    shmreg_unregister_all(r);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* Under mu. */
static struct shmreg_region *shmreg_find(struct shmreg *r, const char *name)
{
    struct list *q;
    list_foreach(q, &r->regions) {
        struct shmreg_region *g = list_data(q, struct shmreg_region, link);
        if (strcmp(g->name, name) == 0)
            return g;
    }
    return NULL;
}

/* Opens and maps the object's window; the registry's lock is not held
 * (shm_open and mmap may take a while, and a name taken meanwhile is
 * checked again after). */
static int shmreg_map(struct shmreg_region *g, struct error *err)
{
    int fd = shm_open(g->key, O_RDWR, 0);
    if (fd < 0) {
        int e = errno;
        if (e == EACCES || e == EPERM)
            return error_set(err, BG_EFORBIDDEN, "key \"%s\": this server may not open the "
                             "shared memory object read-write (%s): give it the server's user "
                             "or mode 0666", g->key, strerror(e));
        return error_set(err, BG_EINVAL, "key \"%s\": no shared memory object can be opened "
                         "(%s): create it first (tritonclient.utils.shared_memory."
                         "create_shared_memory_region) with the same key", g->key,
                         strerror(e));
    }
    struct stat stt;
    if (fstat(fd, &stt) != 0) {
        int e = errno;
        close(fd);
        return error_set(err, BG_EINVAL, "key \"%s\": fstat failed: %s", g->key, strerror(e));
    }
    uint64_t size = stt.st_size > 0 ? (uint64_t)stt.st_size : 0;
    if (g->offset > size || g->byte_size > size - g->offset) {
        close(fd);
        return error_set(err, BG_EINVAL, "offset %llu + byte_size %llu is past the end of the "
                         "shared memory object \"%s\" (%llu bytes)",
                         (unsigned long long)g->offset, (unsigned long long)g->byte_size,
                         g->key, (unsigned long long)size);
    }
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t start = g->offset / page * page;
    g->map_len = (size_t)(g->offset - start + g->byte_size);
    g->map = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
    int e = errno;
    close(fd);   /* the mapping keeps the object */
    if (g->map == MAP_FAILED)
        return error_set(err, BG_EINVAL, "key \"%s\": mmap of %zu bytes failed: %s", g->key,
                         g->map_len, strerror(e));
    g->base = (unsigned char *)g->map + (g->offset - start);
    return 0;
}

int shmreg_register(struct shmreg *r, const char *name, const char *key, uint64_t offset,
                    uint64_t byte_size, struct error *err)
{
    size_t nl = strlen(name), kl = strlen(key);
    if (nl == 0 || nl >= SHMREG_NAME_MAX)
        return error_set(err, BG_EINVAL, "region name: must be 1 to %d bytes",
                         SHMREG_NAME_MAX - 1);
    if (kl == 0 || kl >= SHMREG_KEY_MAX)
        return error_set(err, BG_EINVAL, "key: must be 1 to %d bytes", SHMREG_KEY_MAX - 1);
    if (byte_size == 0)
        return error_set(err, BG_EINVAL, "byte_size: must be > 0");
    if (byte_size > SIZE_MAX / 2 || offset > UINT64_MAX / 2)
        return error_set(err, BG_EINVAL, "offset %llu, byte_size %llu: too large",
                         (unsigned long long)offset, (unsigned long long)byte_size);
    pthread_mutex_lock(&r->mu);
    bool taken = shmreg_find(r, name) != NULL;
    pthread_mutex_unlock(&r->mu);
    if (taken)
        goto exists;
    struct shmreg_region *g = calloc(1, sizeof *g);
    if (!g)
        return error_set(err, BG_ENOMEM, "out of memory for a region");
    memcpy(g->name, name, nl + 1);
    memcpy(g->key, key, kl + 1);
    g->offset = offset;
    g->byte_size = byte_size;
    list_init(&g->link);
    int rc = shmreg_map(g, err);
    if (rc) {
        free(g);
        return rc;
    }
    pthread_mutex_lock(&r->mu);
    taken = shmreg_find(r, name) != NULL;   /* registered meanwhile by another thread */
    bool full = !taken && r->n >= SHMREG_REGIONS_MAX;
    if (!taken && !full) {
        atomic_store(&g->refs, 1);
        list_insert_tail(&r->regions, &g->link);
        r->n++;
    }
    pthread_mutex_unlock(&r->mu);
    if (full) {
        shmreg_region_unmap(g);
        return error_set(err, BG_EINVAL, "%d regions are registered, the most batchgate keeps "
                         "at once: unregister some first", SHMREG_REGIONS_MAX);
    }
    if (!taken)
        return 0;
    shmreg_region_unmap(g);
exists:
    return error_set(err, BG_EINVAL, "region \"%s\" is already registered: unregister it first "
                     "(POST /v2/systemsharedmemory/region/%s/unregister)", name, name);
}

int shmreg_unregister(struct shmreg *r, const char *name, struct error *err)
{
    pthread_mutex_lock(&r->mu);
    struct shmreg_region *g = shmreg_find(r, name);
    if (g) {
        list_remove(&g->link);
        r->n--;
    }
    pthread_mutex_unlock(&r->mu);
    if (!g)
        return error_set(err, BG_ENOTFOUND, "no system shared memory region \"%s\" is "
                         "registered", name);
    shmreg_release(g);
    return 0;
}

int shmreg_unregister_all(struct shmreg *r)
{
    struct list gone;
    list_init(&gone);
    pthread_mutex_lock(&r->mu);
    list_splice_tail(&gone, &r->regions);
    r->n = 0;
    pthread_mutex_unlock(&r->mu);
    int n = 0;
    struct list *q, *tmp;
    list_foreach_safe(q, tmp, &gone) {
        list_remove(q);
        shmreg_release(list_data(q, struct shmreg_region, link));
        n++;
    }
    return n;
}

int shmreg_count(struct shmreg *r)
{
    pthread_mutex_lock(&r->mu);
    int n = r->n;
    pthread_mutex_unlock(&r->mu);
    return n;
}

static int shmreg_append_status(struct buf *out, const struct shmreg_region *g)
{
    int rc = buf_append(out, "{\"name\":", 8);
    rc |= json_append_string(out, g->name, strlen(g->name));
    rc |= buf_append(out, ",\"key\":", 7);
    rc |= json_append_string(out, g->key, strlen(g->key));
    rc |= buf_appendf(out, ",\"offset\":%llu,\"byte_size\":%llu}", (unsigned long long)g->offset,
                      (unsigned long long)g->byte_size);
    return rc ? -1 : 0;
}

int shmreg_status_json(struct shmreg *r, const char *name, struct buf *out, struct error *err)
{
    int rc = buf_append(out, "[", 1);
    bool found = false;
    pthread_mutex_lock(&r->mu);
    struct list *q;
    list_foreach(q, &r->regions) {
        struct shmreg_region *g = list_data(q, struct shmreg_region, link);
        if (name && strcmp(g->name, name) != 0)
            continue;
        if (found)
            rc |= buf_append(out, ",", 1);
        found = true;
        rc |= shmreg_append_status(out, g);
    }
    pthread_mutex_unlock(&r->mu);
    rc |= buf_append(out, "]", 1);
    if (rc)
        return error_set(err, BG_ENOMEM, "out of memory for the status");
    if (name && !found)
        return error_set(err, BG_ENOTFOUND, "no system shared memory region \"%s\" is "
                         "registered", name);
    return 0;
}

int shmreg_acquire(struct shmreg *r, const char *name, uint64_t offset, uint64_t byte_size,
                   const char *what, struct shmreg_region **region, void **bytes,
                   struct error *err)
{
    *region = NULL;
    *bytes = NULL;
    pthread_mutex_lock(&r->mu);
    struct shmreg_region *g = shmreg_find(r, name);
    if (g)
        atomic_fetch_add(&g->refs, 1);
    pthread_mutex_unlock(&r->mu);
    if (!g)
        return error_set(err, BG_EINVAL, "%s: parameters.shared_memory_region: no system shared "
                         "memory region \"%s\" is registered (GET /v2/systemsharedmemory/status "
                         "lists them)", what, name);
    if (offset > g->byte_size || byte_size > g->byte_size - offset) {
        uint64_t size = g->byte_size;
        shmreg_release(g);
        return error_set(err, BG_EINVAL, "%s: parameters.shared_memory_offset %llu + "
                         "shared_memory_byte_size %llu is past the end of region \"%s\" (%llu "
                         "bytes)", what, (unsigned long long)offset,
                         (unsigned long long)byte_size, name, (unsigned long long)size);
    }
    *region = g;
    *bytes = g->base + offset;
    return 0;
}

int shmreg_peer_is_loopback(const char *addr)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, addr, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, addr, &a6) != 1)
        return 0;
    if (IN6_IS_ADDR_LOOPBACK(&a6))
        return 1;
    return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
}
