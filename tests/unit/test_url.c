/*
 * tests/unit/test_url.c — URLs of remote models (remote/url.h): hf://
 * expansion and HF_ENDPOINT, refused arguments, redaction, origins for
 * token scoping, redirect resolution, split-model shard names.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "remote/url.h"

static void expands_to(const char *arg, const char *want)
{
    char *url = NULL;
    struct gguf_diag d;
    enum gguf_err e = remote_url_expand(arg, &url, &d);
    if (e != GGUF_OK)
        fail_msg("'%s' refused: %s", arg, d.msg);
    if (strcmp(url, want) != 0)
        fail_msg("'%s' -> '%s', want '%s'", arg, url, want);
    free(url);
}

static void refused(const char *arg, const char *words)
{
    char *url = (char *)"unchanged";
    struct gguf_diag d;
    enum gguf_err e = remote_url_expand(arg, &url, &d);
    if (e == GGUF_OK)
        fail_msg("'%s' accepted as '%s'", arg, url);
    assert_null(url);
    assert_int_equal(e, GGUF_E_INVAL);
    if (!strstr(d.msg, words))
        fail_msg("'%s': message '%s' lacks '%s'", arg, d.msg, words);
    assert_null(strchr(d.msg, '\n'));
}

static void test_expand_http(void **state)
{
    (void)state;
    expands_to("http://127.0.0.1:8080/files/m.gguf", "http://127.0.0.1:8080/files/m.gguf");
    expands_to("https://example.com/a/b.gguf?X-Amz-Signature=abc",
               "https://example.com/a/b.gguf?X-Amz-Signature=abc");
    expands_to("HTTPS://Example.COM/m.gguf", "HTTPS://Example.COM/m.gguf");
    refused("ftp://example.com/m.gguf", "unsupported URL scheme");
    refused("file:///etc/passwd", "unsupported URL scheme");
    refused("model.gguf", "not a URL");
    refused("/models/m.gguf", "not a URL");
    refused("http://", "not a valid URL");
    refused("http://exa mple.com/m.gguf", "blanks");
    refused("http://example.com/m\n.gguf", "control");
    refused("https:///path-without-host", "not a valid URL");
}

static void test_expand_hf(void **state)
{
    (void)state;
    unsetenv("HF_ENDPOINT");
    expands_to("hf://Qwen/Qwen2-0.5B-Instruct-GGUF/qwen2-0_5b-instruct-q4_k_m.gguf",
               "https://huggingface.co/Qwen/Qwen2-0.5B-Instruct-GGUF/resolve/main/"
               "qwen2-0_5b-instruct-q4_k_m.gguf");
    expands_to("hf://org/repo/sub/dir/m.gguf@v1.0",
               "https://huggingface.co/org/repo/resolve/v1.0/sub/dir/m.gguf");
    expands_to("hf://org/repo/m.gguf@refs/pr/1",
               "https://huggingface.co/org/repo/resolve/refs%2Fpr%2F1/m.gguf");
    expands_to("hf://org/repo/a@b.gguf@main",
               "https://huggingface.co/org/repo/resolve/main/a%40b.gguf");
}

static void test_expand_hf_encoding(void **state)
{
    (void)state;
    unsetenv("HF_ENDPOINT");
    expands_to("hf://org/repo/%25+é.gguf",
               "https://huggingface.co/org/repo/resolve/main/%2525%2B%C3%A9.gguf");
    expands_to("hf://datasets/org/repo/d/m.gguf",
               "https://huggingface.co/datasets/org/repo/resolve/main/d/m.gguf");
    setenv("HF_ENDPOINT", "http://127.0.0.1:9999/hf//", 1);
    expands_to("hf://org/repo/m.gguf", "http://127.0.0.1:9999/hf/org/repo/resolve/main/m.gguf");
    setenv("HF_ENDPOINT", "ftp://mirror/", 1);
    refused("hf://org/repo/m.gguf", "HF_ENDPOINT");
    setenv("HF_ENDPOINT", "", 1);
    expands_to("hf://org/repo/m.gguf", "https://huggingface.co/org/repo/resolve/main/m.gguf");
    unsetenv("HF_ENDPOINT");
    refused("hf://org", "expected hf://ORG/REPO/FILE");
    refused("hf://org/repo", "expected hf://ORG/REPO/FILE");
    refused("hf://org/repo/", "empty");
    refused("hf://org/repo/a//b.gguf", "empty");
    refused("hf://org/repo/../x.gguf", "'..'");
    refused("hf://org/repo/./x.gguf", "'.'");
    refused("hf://org/../x.gguf", "ORG and REPO");
    refused("hf://o%rg/repo/x.gguf", "ORG and REPO");
    refused("hf:///repo/x.gguf", "ORG and REPO");
    refused("hf://org/repo/x.gguf@", "empty revision");
    refused("hf://org/repo/x y.gguf", "blanks");
}

static void redacts(const char *url, const char *want)
{
    char *r = remote_url_redact(url);
    assert_non_null(r);
    if (strcmp(r, want) != 0)
        fail_msg("'%s' -> '%s', want '%s'", url, r, want);
    free(r);
}

static void test_redact(void **state)
{
    (void)state;
    redacts("http://127.0.0.1:80/files/m.gguf", "http://127.0.0.1:80/files/m.gguf");
    redacts("https://user:pw@host/p?sig=1#frag", "https://host/p?\xe2\x80\xa6");
    redacts("https://a@b@host:8443/p", "https://host:8443/p");
    redacts("https://host/p#frag?x", "https://host/p");
    redacts("https://host?x=1", "https://host?\xe2\x80\xa6");
    redacts("https://tok@host", "https://host");
    redacts("user:pw@host/x?y", "host/x?\xe2\x80\xa6");
    redacts("https://host/\x01\xff\x7f", "https://host/???");
    redacts("", "");
    char out[32];
    remote_url_redact_to("https://u:p@example.com/a/very/long/path/to/a/model.gguf?sig=zz", out,
                         sizeof out);
    assert_true(strlen(out) < sizeof out);
    assert_non_null(strstr(out, "\xe2\x80\xa6"));
    assert_null(strstr(out, "u:p"));
    assert_null(strstr(out, "zz"));
    assert_memory_equal(out, "https://", 8);
    remote_url_redact_to("https://h/x", out, sizeof out);
    assert_string_equal(out, "https://h/x");
}

/* Every URL in a message, as remote_url_redact shows it. */
static void test_text_redact(void **state)
{
    (void)state;
    char msg[256] = "https://u:p@host/a.gguf?sig=1: HTTP 403 (from http://x:y@cdn/b?t=2 'https://h/c')";
    remote_text_redact(msg, sizeof msg);
    assert_string_equal(msg, "https://host/a.gguf?\xe2\x80\xa6: HTTP 403 (from http://cdn/b?\xe2\x80\xa6 "
                             "'https://h/c')");
    char plain[64] = "no URL here: a :// alone";
    remote_text_redact(plain, sizeof plain);
    assert_string_equal(plain, "no URL here: a :// alone");
    char tiny[16] = "https://a:b@h/x";
    remote_text_redact(tiny, sizeof tiny);
    assert_string_equal(tiny, "https://h/x");
}

static void test_host_origin(void **state)
{
    (void)state;
    char *h = remote_url_host("https://User:pw@Hub.Example:8443/x?y");
    assert_string_equal(h, "hub.example:8443");
    free(h);
    h = remote_url_host("http://127.0.0.1/x");
    assert_string_equal(h, "127.0.0.1");
    free(h);
    assert_null(remote_url_host("not a url"));
    assert_true(remote_url_same_origin("https://hub.example/a", "https://HUB.example:443/b?c"));
    assert_true(remote_url_same_origin("http://127.0.0.1:8080/a", "http://127.0.0.1:8080/z"));
    assert_false(remote_url_same_origin("http://127.0.0.1:8080/a", "http://127.0.0.1:8081/a"));
    assert_false(remote_url_same_origin("https://hub.example/a", "http://hub.example/a"));
    assert_false(remote_url_same_origin("https://hub.example/a", "https://cdn.example/a"));
    assert_false(remote_url_same_origin("https://hub.example/a", "https://hub.example.evil/a"));
    assert_false(remote_url_same_origin("https://hub.example/a", "https://hub.example@evil/a"));
    assert_false(remote_url_same_origin("https://hub.example/a", "garbage"));
    assert_true(remote_url_is_downgrade("https://a/x", "http://a/x"));
    assert_false(remote_url_is_downgrade("http://a/x", "https://a/x"));
    assert_false(remote_url_is_downgrade("https://a/x", "HTTPS://b/x"));
}

static void resolves(const char *base, const char *loc, const char *want)
{
    char *u = remote_url_resolve(base, loc);
    if (!want) {
        if (u)
            fail_msg("'%s' + '%s' -> '%s', want NULL", base, loc, u);
        return;
    }
    if (!u || strcmp(u, want) != 0)
        fail_msg("'%s' + '%s' -> '%s', want '%s'", base, loc, u ? u : "NULL", want);
    free(u);
}

static void test_resolve(void **state)
{
    (void)state;
    resolves("https://hub/o/r/resolve/main/m.gguf", "https://cdn.example/blob?sig=1",
             "https://cdn.example/blob?sig=1");
    resolves("https://hub/o/r/resolve/main/m.gguf", "/files/m.gguf", "https://hub/files/m.gguf");
    resolves("https://hub/o/r/resolve/main/m.gguf", "other.gguf",
             "https://hub/o/r/resolve/main/other.gguf");
    resolves("https://hub/a/b", "//cdn/x", "https://cdn/x");
    resolves("http://127.0.0.1:1/a", "http://127.0.0.1:2/b", "http://127.0.0.1:2/b");
    resolves("https://hub/a", "file:///etc/passwd", NULL);
    resolves("https://hub/a", "ftp://x/y", NULL);
    resolves("https://hub/a", "gopher://x/y", NULL);
}

static void test_split(void **state)
{
    (void)state;
    unsigned n = 0, k = 0;
    assert_true(remote_url_is_split("https://h/m-00002-of-00003.gguf", &n, &k));
    assert_int_equal(n, 3);
    assert_int_equal(k, 2);
    assert_true(remote_url_is_split("https://h/m-00001-of-00001.gguf?sig=x", &n, &k));
    assert_int_equal(n, 1);
    assert_false(remote_url_is_split("https://h/m-00004-of-00003.gguf", &n, &k));
    assert_false(remote_url_is_split("https://h/m-00000-of-00003.gguf", &n, &k));
    assert_false(remote_url_is_split("https://h/m-0001-of-0003.gguf", &n, &k));
    assert_false(remote_url_is_split("https://h/m.gguf", &n, &k));
    assert_false(remote_url_is_split("https://h/m-00001-of-00003.gguf.part", &n, &k));
    assert_false(remote_url_is_split("x", &n, &k));
    char *s = remote_url_shard("https://h/d/m-00001-of-00012.gguf", 12);
    assert_string_equal(s, "https://h/d/m-00012-of-00012.gguf");
    free(s);
    s = remote_url_shard("https://h/m-00003-of-00003.gguf?a=b", 1);
    assert_string_equal(s, "https://h/m-00001-of-00003.gguf?a=b");
    free(s);
    assert_null(remote_url_shard("https://h/m-00001-of-00003.gguf", 4));
    assert_null(remote_url_shard("https://h/m-00001-of-00003.gguf", 0));
    assert_null(remote_url_shard("https://h/m.gguf", 1));
}

static void test_is_remote(void **state)
{
    (void)state;
    assert_true(remote_url_is_remote("http://x"));
    assert_true(remote_url_is_remote("HTTPS://x"));
    assert_true(remote_url_is_remote("hf://o/r/f"));
    assert_false(remote_url_is_remote("./http://x"));
    assert_false(remote_url_is_remote("model.gguf"));
    assert_false(remote_url_is_remote("ftp://x"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expand_http),
        cmocka_unit_test(test_expand_hf),
        cmocka_unit_test(test_expand_hf_encoding),
        cmocka_unit_test(test_redact),
        cmocka_unit_test(test_text_redact),
        cmocka_unit_test(test_host_origin),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_is_remote),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
