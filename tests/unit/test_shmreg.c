/* test_shmreg.c - the system shared memory registry (gateway/shmreg.c) on
 * real POSIX shared memory objects: every bound of register (object size
 * by fstat, offset past a page, byte_size 0, names) and of acquire (the
 * window inside the region), double registration, unknown names, status
 * in Triton's shape, a region unregistered while held staying mapped until
 * its last release (and gone from /proc/self/maps after), and the loopback
 * rule's addresses. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "gateway/shmreg.h"

static char key[64];

/* A fresh object of `size` bytes holding 0, 1, 2, ... (mod 251). */
static void make_object(size_t size)
{
    snprintf(key, sizeof key, "/bg_test_shmreg_%d", (int)getpid());
    shm_unlink(key);
    int fd = shm_open(key, O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    unsigned char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(p != MAP_FAILED);
    for (size_t i = 0; i < size; i++)
        p[i] = (unsigned char)(i % 251);
    munmap(p, size);
    close(fd);
}

/* Lines of /proc/self/maps naming the object. */
static int maps_count(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, key + 1))
            n++;
    if (f)
        fclose(f);
    return n;
}

static int teardown(void **state)
{
    (void)state;
    shm_unlink(key);
    return 0;
}

static void test_register_bounds(void **state)
{
    (void)state;
    make_object(10000);
    struct shmreg *r = shmreg_new();
    struct error err = {0};
    /* Past the object's end: by one byte, by the offset alone. */
    assert_int_equal(shmreg_register(r, "a", key, 0, 10001, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "past the end"));
    assert_non_null(strstr(err.msg, "10000 bytes"));
    assert_int_equal(shmreg_register(r, "a", key, 10001, 1, &err), -BG_EINVAL);
    assert_int_equal(shmreg_register(r, "a", key, 9999, 2, &err), -BG_EINVAL);
    /* Sizes that would overflow offset + byte_size. */
    assert_int_equal(shmreg_register(r, "a", key, UINT64_MAX - 1, 4, &err), -BG_EINVAL);
    assert_int_equal(shmreg_register(r, "a", key, 4, UINT64_MAX - 1, &err), -BG_EINVAL);
    assert_int_equal(shmreg_register(r, "a", key, 0, 0, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "byte_size"));
    assert_int_equal(shmreg_register(r, "", key, 0, 4, &err), -BG_EINVAL);
    assert_int_equal(shmreg_register(r, "a", "", 0, 4, &err), -BG_EINVAL);
    char longname[SHMREG_NAME_MAX + 1];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_int_equal(shmreg_register(r, longname, key, 0, 4, &err), -BG_EINVAL);
    /* No such object. */
    assert_int_equal(shmreg_register(r, "a", "/bg_test_shmreg_none", 0, 4, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "/bg_test_shmreg_none"));
    assert_int_equal(shmreg_count(r), 0);
    assert_int_equal(maps_count(), 0);
    /* Exactly to the end, and at an offset past a page (not page aligned). */
    assert_int_equal(shmreg_register(r, "all", key, 0, 10000, &err), 0);
    assert_int_equal(shmreg_register(r, "tail", key, 4099, 5901, &err), 0);
    assert_int_equal(shmreg_count(r), 2);
    /* The same name again: refused, the first one kept. */
    assert_int_equal(shmreg_register(r, "all", key, 0, 8, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "already registered"));
    assert_int_equal(shmreg_count(r), 2);
    shmreg_free(r);
    assert_int_equal(maps_count(), 0);
}

static void test_acquire_bounds(void **state)
{
    (void)state;
    make_object(10000);
    struct shmreg *r = shmreg_new();
    struct error err = {0};
    assert_int_equal(shmreg_register(r, "tail", key, 4099, 5000, &err), 0);
    struct shmreg_region *g;
    void *p;
    /* The region's byte 0 is the object's byte 4099. */
    assert_int_equal(shmreg_acquire(r, "tail", 0, 5000, "inputs[0]", &g, &p, &err), 0);
    assert_int_equal(((unsigned char *)p)[0], 4099 % 251);
    assert_int_equal(((unsigned char *)p)[4999], (4099 + 4999) % 251);
    shmreg_release(g);
    assert_int_equal(shmreg_acquire(r, "tail", 4996, 4, "inputs[0]", &g, &p, &err), 0);
    assert_int_equal(((unsigned char *)p)[0], (4099 + 4996) % 251);
    shmreg_release(g);
    assert_int_equal(shmreg_acquire(r, "tail", 5000, 0, "x", &g, &p, &err), 0);
    shmreg_release(g);
    /* Past the region (not the object: it is longer). */
    assert_int_equal(shmreg_acquire(r, "tail", 4997, 4, "outputs[0]", &g, &p, &err), -BG_EINVAL);
    assert_null(g);
    assert_non_null(strstr(err.msg, "outputs[0]"));
    assert_non_null(strstr(err.msg, "past the end of region \"tail\""));
    assert_int_equal(shmreg_acquire(r, "tail", 5001, 0, "x", &g, &p, &err), -BG_EINVAL);
    assert_int_equal(shmreg_acquire(r, "tail", UINT64_MAX, 2, "x", &g, &p, &err), -BG_EINVAL);
    assert_int_equal(shmreg_acquire(r, "tail", 2, UINT64_MAX, "x", &g, &p, &err), -BG_EINVAL);
    assert_int_equal(shmreg_acquire(r, "nope", 0, 1, "inputs[0]", &g, &p, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "\"nope\""));
    shmreg_free(r);
}

static void test_unregister_while_held(void **state)
{
    (void)state;
    make_object(4096);
    struct shmreg *r = shmreg_new();
    struct error err = {0};
    assert_int_equal(shmreg_register(r, "a", key, 0, 4096, &err), 0);
    assert_int_equal(maps_count(), 1);
    struct shmreg_region *g1, *g2;
    void *p1, *p2;
    assert_int_equal(shmreg_acquire(r, "a", 0, 4096, "x", &g1, &p1, &err), 0);
    assert_int_equal(shmreg_acquire(r, "a", 100, 8, "x", &g2, &p2, &err), 0);
    assert_int_equal(shmreg_unregister(r, "a", &err), 0);
    /* Gone by name at once: status, acquire, a new registration. */
    assert_int_equal(shmreg_count(r), 0);
    struct shmreg_region *g3;
    void *p3;
    assert_int_equal(shmreg_acquire(r, "a", 0, 1, "x", &g3, &p3, &err), -BG_EINVAL);
    assert_int_equal(shmreg_unregister(r, "a", &err), -BG_ENOTFOUND);
    /* ... but mapped while held: reads and writes still land. */
    assert_int_equal(maps_count(), 1);
    ((unsigned char *)p1)[4095] = 7;
    assert_int_equal(((unsigned char *)p2)[0], 100 % 251);
    shmreg_release(g1);
    assert_int_equal(maps_count(), 1);
    shmreg_release(g2);
    assert_int_equal(maps_count(), 0);
    /* The name is free again. */
    assert_int_equal(shmreg_register(r, "a", key, 0, 4096, &err), 0);
    assert_int_equal(shmreg_register(r, "b", key, 0, 16, &err), 0);
    assert_int_equal(maps_count(), 2);
    assert_int_equal(shmreg_unregister_all(r), 2);
    assert_int_equal(maps_count(), 0);
    shmreg_release(NULL);
    shmreg_free(r);
}

/* At most SHMREG_REGIONS_MAX regions at once: a client registering
 * without end took every mapping the kernel allows, and models could no
 * longer load. The refused one maps nothing; one unregistered makes room. */
static void test_regions_are_bounded(void **state)
{
    (void)state;
    make_object(4096);
    struct shmreg *r = shmreg_new();
    struct error err = {0};
    char name[32];
    for (int i = 0; i < SHMREG_REGIONS_MAX; i++) {
        snprintf(name, sizeof name, "r%d", i);
        assert_int_equal(shmreg_register(r, name, key, 0, 16, &err), 0);
    }
    assert_int_equal(shmreg_count(r), SHMREG_REGIONS_MAX);
    int maps = maps_count();
    assert_int_equal(shmreg_register(r, "one-more", key, 0, 16, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "unregister some first"));
    assert_int_equal(maps_count(), maps);
    assert_int_equal(shmreg_unregister(r, "r7", &err), 0);
    assert_int_equal(shmreg_register(r, "one-more", key, 0, 16, &err), 0);
    assert_int_equal(shmreg_unregister_all(r), SHMREG_REGIONS_MAX);
    assert_int_equal(shmreg_count(r), 0);
    shmreg_free(r);
}

static void test_status_json(void **state)
{
    (void)state;
    make_object(4096);
    struct shmreg *r = shmreg_new();
    struct error err = {0};
    struct buf b = BUF_INIT;
    assert_int_equal(shmreg_status_json(r, NULL, &b, &err), 0);
    assert_int_equal(b.len, 2);
    assert_memory_equal(b.data, "[]", 2);
    b.len = 0;
    assert_int_equal(shmreg_register(r, "in\"put", key, 8, 16, &err), 0);
    assert_int_equal(shmreg_register(r, "out", key, 0, 4096, &err), 0);
    assert_int_equal(shmreg_status_json(r, NULL, &b, &err), 0);
    char want[512];
    snprintf(want, sizeof want, "[{\"name\":\"in\\\"put\",\"key\":\"%s\",\"offset\":8,"
             "\"byte_size\":16},{\"name\":\"out\",\"key\":\"%s\",\"offset\":0,"
             "\"byte_size\":4096}]", key, key);
    assert_int_equal(b.len, strlen(want));
    assert_memory_equal(b.data, want, b.len);
    b.len = 0;
    assert_int_equal(shmreg_status_json(r, "out", &b, &err), 0);
    assert_non_null(memmem(b.data, b.len, "\"name\":\"out\"", 12));
    assert_null(memmem(b.data, b.len, "in\\\"put", 7));
    b.len = 0;
    assert_int_equal(shmreg_status_json(r, "zz", &b, &err), -BG_ENOTFOUND);
    assert_non_null(strstr(err.msg, "\"zz\""));
    buf_free(&b);
    shmreg_free(r);
}

static void test_peer_is_loopback(void **state)
{
    (void)state;
    static const struct {
        const char *addr;
        int loopback;
    } cases[] = {
        {"127.0.0.1", 1}, {"127.255.0.9", 1}, {"::1", 1}, {"::ffff:127.0.0.1", 1},
        {"::ffff:127.3.2.1", 1}, {"128.0.0.1", 0}, {"126.255.255.255", 0}, {"10.0.0.1", 0},
        {"192.0.2.2", 0}, {"::", 0}, {"::2", 0}, {"fd00::2", 0}, {"::ffff:10.0.0.1", 0},
        {"::127.0.0.1", 0}, {"", 0}, {"localhost", 0}, {"127.0.0.1 ", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (shmreg_peer_is_loopback(cases[i].addr) != cases[i].loopback)
            fail_msg("%s: expected %d", cases[i].addr, cases[i].loopback);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_register_bounds, teardown),
        cmocka_unit_test_teardown(test_acquire_bounds, teardown),
        cmocka_unit_test_teardown(test_unregister_while_held, teardown),
        cmocka_unit_test_teardown(test_status_json, teardown),
        cmocka_unit_test_teardown(test_regions_are_bounded, teardown),
        cmocka_unit_test(test_peer_is_loopback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
