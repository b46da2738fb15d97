/* test_labels.c - a model output's labels file: one label a line, at
 * least one per element, UTF-8, "\r\n" endings, and the messages that name
 * the file and both counts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "backends/labels.h"

static void expect_label(const struct labels *l, int64_t i, const char *want)
{
    size_t len;
    const char *s = labels_get(l, i, &len);
    if (len != strlen(want) || memcmp(s, want, len) != 0)
        fail_msg("label %lld: got \"%.*s\", want \"%s\"", (long long)i, (int)len, s, want);
}

static void test_lines(void **state)
{
    (void)state;
    struct labels *l;
    struct error err = {0};
    const char text[] = "zero\r\none\n\nthree: 3\nfour";   /* no newline at the end */
    assert_int_equal(labels_parse(text, sizeof text - 1, "t", 5, &l, &err), 0);
    assert_int_equal(labels_count(l), 5);
    expect_label(l, 0, "zero");
    expect_label(l, 1, "one");
    expect_label(l, 2, "");          /* an empty line: no label for that class */
    expect_label(l, 3, "three: 3");
    expect_label(l, 4, "four");
    expect_label(l, 5, "");          /* past the end */
    expect_label(l, -1, "");
    labels_free(l);
    /* More lines than elements: the first ones are the labels. */
    const char more[] = "a\nb\nc\n";
    assert_int_equal(labels_parse(more, sizeof more - 1, "t", 2, &l, &err), 0);
    assert_int_equal(labels_count(l), 2);
    expect_label(l, 1, "b");
    labels_free(l);
    labels_free(NULL);
}

static void test_refused(void **state)
{
    (void)state;
    struct labels *l = (struct labels *)1;
    struct error err = {0};
    /* The newline ending the file starts no line: 2 labels, not 3. */
    assert_int_equal(labels_parse("a\nb\n", 4, "models/d/labels.txt", 3, &l, &err), -BG_ECONFIG);
    assert_null(l);
    assert_non_null(strstr(err.msg, "models/d/labels.txt: 2 labels"));
    assert_non_null(strstr(err.msg, "3 elements per row"));
    assert_int_equal(labels_parse("", 0, "e", 1, &l, &err), -BG_ECONFIG);
    assert_non_null(strstr(err.msg, "0 labels"));
    const char bad[] = "ok\n\xff\xfe\n";
    assert_int_equal(labels_parse(bad, sizeof bad - 1, "u", 2, &l, &err), -BG_ECONFIG);
    assert_non_null(strstr(err.msg, "line 2 is not UTF-8"));
    /* UTF-8 past ASCII is fine. */
    const char utf[] = "caf\xc3\xa9\n\xe5\x8c\x97\xe4\xba\xac\n";
    assert_int_equal(labels_parse(utf, sizeof utf - 1, "u", 2, &l, &err), 0);
    expect_label(l, 0, "caf\xc3\xa9");
    labels_free(l);
}

static void test_load(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_labels.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/labels.txt", dir);
    struct labels *l;
    struct error err = {0};
    assert_int_equal(labels_load(path, 1, &l, &err), -BG_ECONFIG);
    assert_non_null(strstr(err.msg, "cannot open the labels file"));
    assert_non_null(strstr(err.msg, path));
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("cat\ndog\n", f);
    fclose(f);
    assert_int_equal(labels_load(path, 2, &l, &err), 0);
    expect_label(l, 1, "dog");
    labels_free(l);
    assert_int_equal(labels_load(dir, 2, &l, &err), -BG_ECONFIG);   /* a folder */
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
