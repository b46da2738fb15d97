/* test_list.c - the intrusive list: order, removal while walking, splice,
 * double remove. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/list.h"

struct item {
    int v;
    struct list link;
};

static void check(const struct list *h, const int *want, int n)
{
    int i = 0;
    const struct list *q;
    list_foreach(q, h) {
        assert_true(i < n);
        assert_int_equal(list_data(q, struct item, link)->v, want[i]);
        i++;
    }
    assert_int_equal(i, n);
    /* The back links agree with the forward ones. */
    i = n;
    for (q = h->prev; q != h; q = q->prev)
        assert_int_equal(list_data(q, struct item, link)->v, want[--i]);
    assert_int_equal(i, 0);
}

static void test_order_and_remove(void **state)
{
    (void)state;
    struct list h;
    struct item it[5];
    list_init(&h);
    assert_true(list_empty(&h));
    assert_null(list_first(&h));
    assert_null(list_last(&h));
    for (int i = 0; i < 5; i++) {
        it[i].v = i;
        list_insert_tail(&h, &it[i].link);
    }
    check(&h, (int[]){0, 1, 2, 3, 4}, 5);
    list_remove(&it[2].link);
    assert_false(list_linked(&it[2].link));
    list_remove(&it[2].link);   /* harmless */
    check(&h, (int[]){0, 1, 3, 4}, 4);
    list_insert_head(&h, &it[2].link);
    check(&h, (int[]){2, 0, 1, 3, 4}, 5);
    list_remove(&it[2].link);
    list_insert_before(&it[3].link, &it[2].link);
    check(&h, (int[]){0, 1, 2, 3, 4}, 5);
}

static void test_remove_while_walking(void **state)
{
    (void)state;
    struct list h, *q, *tmp;
    struct item it[6];
    list_init(&h);
    for (int i = 0; i < 6; i++) {
        it[i].v = i;
        list_insert_tail(&h, &it[i].link);
    }
    list_foreach_safe(q, tmp, &h) {
        if (list_data(q, struct item, link)->v % 2)
            list_remove(q);
    }
    check(&h, (int[]){0, 2, 4}, 3);
    assert_ptr_equal(list_next(&h, &it[2].link), &it[4].link);
    assert_null(list_next(&h, &it[4].link));
}

static void test_splice(void **state)
{
    (void)state;
    struct list a, b;
    struct item it[4];
    list_init(&a);
    list_init(&b);
    list_splice_tail(&a, &b);   /* empty into empty */
    assert_true(list_empty(&a));
    for (int i = 0; i < 4; i++) {
        it[i].v = i;
        list_insert_tail(i < 2 ? &a : &b, &it[i].link);
    }
    list_splice_tail(&a, &b);
    assert_true(list_empty(&b));
    check(&a, (int[]){0, 1, 2, 3}, 4);
    list_splice_tail(&b, &a);
    assert_true(list_empty(&a));
    check(&b, (int[]){0, 1, 2, 3}, 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_remove),
        cmocka_unit_test(test_remove_while_walking),
        cmocka_unit_test(test_splice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
