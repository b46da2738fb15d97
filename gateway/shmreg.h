/* shmreg.h - Triton's system shared memory regions (docs/MODELS.md "System
 * shared memory"): named windows [offset, offset + byte_size) of POSIX
 * shared memory objects (shm_open keys) that a client on this host created,
 * mapped read-write so that inference requests read their inputs from them
 * and write their outputs into them instead of carrying the bytes.
 *
 * Regions are reference counted. The registry holds one reference while a
 * region is registered; every inference request that uses a region holds
 * one from its decoding until its answer is written (shmreg_acquire ..
 * shmreg_release). Unregistering drops the registry's reference at once
 * (the name is free again, status no longer lists it) and the mapping goes
 * with the last reference: a request in flight still reads and writes
 * mapped memory, never an unmapped address. shmreg_free unmaps whatever is
 * registered (main calls it after the IO threads stopped, so nothing holds
 * a reference then).
 *
 * Thread-safe: one mutex around the table (IO threads register, look up
 * and release; none of it is on a hot path long enough to matter). */
#ifndef BG_GATEWAY_SHMREG_H
#define BG_GATEWAY_SHMREG_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"

/* Longest region name and key (as Triton's clients make them, these are
 * short: "input0_data", "/input_simple"). */
#define SHMREG_NAME_MAX 128
#define SHMREG_KEY_MAX 256
/* Regions registered at once, at most: each is a mapping of the process,
 * and a client registering without end took all 65,530 the kernel allows
 * (vm.max_map_count), after which models could not load. perf_analyzer
 * registers one per input and output. */
#define SHMREG_REGIONS_MAX 4096

struct shmreg;
struct shmreg_region;

struct shmreg *shmreg_new(void);
/* Unmaps every registered region. No reference may be held any more. */
void shmreg_free(struct shmreg *r);

/* Maps [offset, offset + byte_size) of the shared memory object `key`
 * (shm_open, read-write) as region `name`. -BG_EINVAL with the reason: a
 * name or key empty or too long, the name already registered, no such
 * object, offset + byte_size past the object's size (fstat), byte_size 0,
 * SHMREG_REGIONS_MAX regions registered already;
 * -BG_EFORBIDDEN when the object may not be opened read-write. */
int shmreg_register(struct shmreg *r, const char *name, const char *key, uint64_t offset,
                    uint64_t byte_size, struct error *err);
/* Forgets `name` (mapped until its last user lets go). 0, or -BG_ENOTFOUND. */
int shmreg_unregister(struct shmreg *r, const char *name, struct error *err);
/* Forgets every region; returns how many there were. */
int shmreg_unregister_all(struct shmreg *r);
/* How many regions are registered. */
int shmreg_count(struct shmreg *r);

/* Triton's status array, appended to out: [{"name","key","offset",
 * "byte_size"}, ...] in registration order; name NULL: all regions, else
 * that one (-BG_ENOTFOUND when it is not registered). 0, or -BG_ENOMEM. */
int shmreg_status_json(struct shmreg *r, const char *name, struct buf *out, struct error *err);

/* A reference to region `name` and the address of its bytes [offset,
 * offset + byte_size): 0 with *region and *bytes set (shmreg_release the
 * region when done), or -BG_EINVAL naming what is wrong (no such region,
 * the window past the region's end). `what` names the tensor in messages
 * ("inputs[0]"). */
int shmreg_acquire(struct shmreg *r, const char *name, uint64_t offset, uint64_t byte_size,
                   const char *what, struct shmreg_region **region, void **bytes,
                   struct error *err);
/* Lets a reference go; the last one unmaps. NULL: nothing. */
void shmreg_release(struct shmreg_region *region);

/* Whether the textual address ("127.0.0.1", "::1", "::ffff:127.0.0.2") is
 * a loopback one: 127.0.0.0/8, ::1, or 127/8 mapped into IPv6. */
int shmreg_peer_is_loopback(const char *addr);

#endif
