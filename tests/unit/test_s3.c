/*
 * tests/unit/test_s3.c — object stores (remote/s3.h): names, URLs of both
 * addressing styles, where credentials, region and endpoint come from
 * (environment, credentials and config files, options) in the AWS CLI's
 * order, hostile profile files (one-line errors, no crash), the warning
 * for a file others may read, error documents.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "remote/s3.h"
#include "remote/url.h"

static char dir[256];
static char cred_path[300], conf_path[300];

static const char *const env_names[] = {
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3", "STORAGE_EMULATOR_HOST",
};

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "%s/gguffs-s3-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir))
        return -1;
    snprintf(cred_path, sizeof cred_path, "%s/credentials", dir);
    snprintf(conf_path, sizeof conf_path, "%s/config", dir);
    for (size_t i = 0; i < sizeof env_names / sizeof env_names[0]; i++)
        unsetenv(env_names[i]);
    setenv("AWS_SHARED_CREDENTIALS_FILE", cred_path, 1);
    setenv("AWS_CONFIG_FILE", conf_path, 1);
    unlink(cred_path);
    unlink(conf_path);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(cred_path);
    unlink(conf_path);
    rmdir(dir);
    return 0;
}

static struct remote_store *load_ok(const char *name, const struct remote_store_opts *o)
{
    struct remote_store *s = NULL;
    struct gguf_diag d;
    enum gguf_err e = remote_store_load(name, o, &s, &d);
    if (e != GGUF_OK)
        fail_msg("%s refused: %s", name, d.msg);
    return s;
}

static void load_refused(const char *name, const struct remote_store_opts *o, const char *words)
{
    struct remote_store *s = NULL;
    struct gguf_diag d;
    enum gguf_err e = remote_store_load(name, o, &s, &d);
    if (e == GGUF_OK)
        fail_msg("%s accepted", name);
    assert_null(s);
    if (!strstr(d.msg, words))
        fail_msg("%s: message '%s' lacks '%s'", name, d.msg, words);
    assert_null(strchr(d.msg, '\n'));
    /* never a secret in a message */
    assert_null(strstr(d.msg, "SECRETVALUE"));
}

static void url_is(const struct remote_store *s, const char *name, const char *want)
{
    char *u = remote_store_url(s, name, NULL);
    assert_non_null(u);
    if (strcmp(u, want) != 0)
        fail_msg("%s -> %s, want %s", name, u, want);
    free(u);
}

static void test_names(void **state)
{
    (void)state;
    struct gguf_diag d;
    assert_true(remote_url_is_remote("s3://b/k"));
    assert_true(remote_url_is_remote("GS://b/k"));
    assert_int_equal(remote_store_check_name("s3://bucket/a/b.gguf", &d), GGUF_OK);
    static const struct { const char *name, *words; } bad[] = {
        { "s3://", "no bucket" },
        { "s3:///key", "no bucket" },
        { "s3://bucket", "no key" },
        { "s3://bucket/", "no key" },
        { "s3://buc ket/k", "letters, digits" },
        { "s3://bucket/a//b", "empty, '.' or '..'" },
        { "s3://bucket/a/../b", "empty, '.' or '..'" },
        { "s3://bucket/./b", "empty, '.' or '..'" },
        { "s3://bucket/a\nb", "control" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(remote_store_check_name(bad[i].name, &d), GGUF_E_INVAL);
        if (!strstr(d.msg, bad[i].words))
            fail_msg("%s: '%s' lacks '%s'", bad[i].name, d.msg, bad[i].words);
        assert_null(strchr(d.msg, '\n'));
    }
    /* expansion passes names on as written */
    char *u = NULL;
    assert_int_equal(remote_url_expand("s3://bucket/m.gguf", &u, &d), GGUF_OK);
    assert_string_equal(u, "s3://bucket/m.gguf");
    free(u);
    assert_int_equal(remote_url_expand("s3://bucket", &u, &d), GGUF_E_INVAL);
    char *b, *k;
    assert_true(remote_store_split_name("gs://bkt/dir/o.gguf", &b, &k));
    assert_string_equal(b, "bkt");
    assert_string_equal(k, "dir/o.gguf");
    free(b);
    free(k);
}

static void test_urls(void **state)
{
    (void)state;
    /* AWS: virtual-hosted, path-style for a bucket that is no DNS label */
    struct remote_store *s = load_ok("s3://my-bucket/m.gguf", NULL);
    assert_string_equal(s->region, "us-east-1");
    assert_null(s->endpoint);
    assert_false(s->path_style);
    url_is(s, "s3://my-bucket/dir/m 1+%.gguf",
           "https://my-bucket.s3.us-east-1.amazonaws.com/dir/m%201%2B%25.gguf");
    url_is(s, "s3://my.bucket/m.gguf", "https://s3.us-east-1.amazonaws.com/my.bucket/m.gguf");
    char *u = remote_store_url(s, "s3://my-bucket/m.gguf", "cn-north-1");
    assert_string_equal(u, "https://my-bucket.s3.cn-north-1.amazonaws.com.cn/m.gguf");
    free(u);
    assert_null(s->access_key);
    assert_non_null(strstr(s->who, "anonymous"));
    remote_store_free(s);

    /* an endpoint: path-style, its path kept, a trailing '/' dropped */
    struct remote_store_opts o = { .endpoint = "http://127.0.0.1:8080/v1/AUTH_x/" };
    s = load_ok("s3://models/m.gguf", &o);
    assert_true(s->path_style);
    url_is(s, "s3://models/a/m.gguf", "http://127.0.0.1:8080/v1/AUTH_x/models/a/m.gguf");
    remote_store_free(s);
    o.addressing = "virtual";
    o.endpoint = "https://store.example:9000";
    s = load_ok("s3://models/m.gguf", &o);
    url_is(s, "s3://models/m.gguf", "https://models.store.example:9000/m.gguf");
    remote_store_free(s);
    load_refused("s3://My_Bucket/m.gguf", &o, "cannot be a host name");
    o.addressing = "path";
    o.endpoint = NULL;
    s = load_ok("s3://models/m.gguf", &o);
    url_is(s, "s3://models/m.gguf", "https://s3.us-east-1.amazonaws.com/models/m.gguf");
    remote_store_free(s);

    /* bad endpoints */
    static const char *const bad[] = { "ftp://x", "http://", "http://u:p@host", "http://h/?q",
                                       "http://h /x" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct remote_store_opts ob = { .endpoint = bad[i] };
        load_refused("s3://models/m.gguf", &ob, "s3_endpoint");
    }

    /* gs:// */
    s = load_ok("gs://bkt/o.gguf", NULL);
    url_is(s, "gs://bkt/o.gguf", "https://storage.googleapis.com/bkt/o.gguf");
    remote_store_free(s);
    setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:4443", 1);
    s = load_ok("gs://bkt/o.gguf", NULL);
    url_is(s, "gs://bkt/o.gguf", "http://127.0.0.1:4443/bkt/o.gguf");
    remote_store_free(s);
    unsetenv("STORAGE_EMULATOR_HOST");
    struct remote_store_opts og = { .region = "eu-west-1" };
    load_refused("gs://bkt/o.gguf", &og, "options of s3://");
}

static void test_env_credentials(void **state)
{
    (void)state;
    setenv("AWS_ACCESS_KEY_ID", "test:tester", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "SECRETVALUE", 1);
    setenv("AWS_SESSION_TOKEN", "tok/en+=", 1);
    setenv("AWS_DEFAULT_REGION", "eu-west-1", 1);
    struct remote_store *s = load_ok("s3://b-1/k", NULL);
    assert_string_equal(s->access_key, "test:tester");
    assert_string_equal(s->secret_key, "SECRETVALUE");
    assert_string_equal(s->session_token, "tok/en+=");
    assert_string_equal(s->who, "AWS_ACCESS_KEY_ID");
    assert_string_equal(s->region, "eu-west-1");
    assert_null(s->warning);
    struct remote_store *c = remote_store_dup(s);
    assert_string_equal(c->secret_key, "SECRETVALUE");
    remote_store_free(c);
    remote_store_free(s);
    setenv("AWS_REGION", "ap-south-1", 1);
    s = load_ok("s3://b-1/k", NULL);
    assert_string_equal(s->region, "ap-south-1");
    remote_store_free(s);
    struct remote_store_opts o = { .region = "sa-east-1" };
    s = load_ok("s3://b-1/k", &o);
    assert_string_equal(s->region, "sa-east-1");
    remote_store_free(s);
    o.region = "Bad Region";
    load_refused("s3://b-1/k", &o, "not a region name");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    load_refused("s3://b-1/k", NULL, "AWS_SECRET_ACCESS_KEY is not");
    setenv("AWS_SECRET_ACCESS_KEY", "has blank", 1);
    load_refused("s3://b-1/k", NULL, "blanks");
    /* endpoints from the environment: the S3 one first */
    setenv("AWS_SECRET_ACCESS_KEY", "SECRETVALUE", 1);
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1", 1);
    setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:2", 1);
    s = load_ok("s3://b-1/k", NULL);
    assert_string_equal(s->endpoint, "http://127.0.0.1:2");
    assert_true(s->path_style);
    remote_store_free(s);
    for (size_t i = 0; i < sizeof env_names / sizeof env_names[0]; i++)
        unsetenv(env_names[i]);
}

static void test_profiles(void **state)
{
    (void)state;
    write_file(cred_path,
               "# comment\n"
               "[default]\n"
               "aws_access_key_id = DEFKEY\n"
               "aws_secret_access_key = SECRETVALUE\n"
               "\n"
               "[dev]\r\n"
               "AWS_Access_Key_Id=dev:key\r\n"
               "aws_secret_access_key: SECRETVALUE\r\n"
               "aws_session_token = devtoken\r\n"
               "[onlykey]\n"
               "aws_access_key_id = K\n", 0600);
    write_file(conf_path,
               "[default]\n"
               "region = eu-central-1\n"
               "[profile dev]\n"
               "region = us-west-2\n"
               "s3 =\n"
               "    endpoint_url = http://127.0.0.1:9000\n"
               "    addressing_style = virtual\n"
               "[profile cfgkeys]\n"
               "aws_access_key_id = CFGKEY\n"
               "aws_secret_access_key = SECRETVALUE\n"
               "endpoint_url = https://minio.example\n"
               "[profile sso]\n"
               "sso_start_url = https://x.awsapps.com/start\n"
               "[profile role]\n"
               "role_arn = arn:aws:iam::1:role/r\n"
               "source_profile = default\n", 0600);
    struct remote_store *s = load_ok("s3://bkt/k", NULL);
    assert_string_equal(s->access_key, "DEFKEY");
    assert_string_equal(s->region, "eu-central-1");
    assert_non_null(strstr(s->who, "'default'"));
    remote_store_free(s);

    setenv("AWS_PROFILE", "dev", 1);
    s = load_ok("s3://bkt/k", NULL);
    assert_string_equal(s->access_key, "dev:key");
    assert_string_equal(s->session_token, "devtoken");
    assert_string_equal(s->region, "us-west-2");
    assert_string_equal(s->endpoint, "http://127.0.0.1:9000");
    assert_false(s->path_style);
    assert_non_null(strstr(s->who, "'dev'"));
    remote_store_free(s);

    /* the environment's keys win over AWS_PROFILE, not over -o aws_profile */
    setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "SECRETVALUE", 1);
    s = load_ok("s3://bkt/k", NULL);
    assert_string_equal(s->access_key, "ENVKEY");
    remote_store_free(s);
    struct remote_store_opts o = { .profile = "cfgkeys" };
    s = load_ok("s3://bkt/k", &o);
    assert_string_equal(s->access_key, "CFGKEY");
    assert_string_equal(s->endpoint, "https://minio.example");
    assert_true(s->path_style);
    assert_string_equal(s->region, "us-east-1");
    remote_store_free(s);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");

    o.profile = "nosuch";
    load_refused("s3://bkt/k", &o, "in neither");
    setenv("AWS_PROFILE", "nosuch", 1);
    load_refused("s3://bkt/k", NULL, "AWS_PROFILE");
    o.profile = "onlykey";
    load_refused("s3://bkt/k", &o, "but not aws_secret_access_key");
    o.profile = "sso";
    load_refused("s3://bkt/k", &o, "export-credentials");
    o.profile = "role";
    load_refused("s3://bkt/k", &o, "role_arn");
    o.profile = "bad]name";
    load_refused("s3://bkt/k", &o, "not a profile name");
    unsetenv("AWS_PROFILE");

    /* a default profile in neither file: anonymous */
    unlink(cred_path);
    unlink(conf_path);
    s = load_ok("s3://bkt/k", NULL);
    assert_null(s->access_key);
    remote_store_free(s);
}

static void test_mode_warning(void **state)
{
    (void)state;
    write_file(cred_path, "[default]\naws_access_key_id = A\naws_secret_access_key = SECRETVALUE\n",
               0644);
    struct remote_store *s = load_ok("s3://bkt/k", NULL);
    assert_non_null(s->warning);
    assert_non_null(strstr(s->warning, "readable by every user"));
    assert_non_null(strstr(s->warning, cred_path));
    assert_null(strstr(s->warning, "SECRETVALUE"));
    remote_store_free(s);
    chmod(cred_path, 0640);
    s = load_ok("s3://bkt/k", NULL);
    assert_non_null(strstr(s->warning, "its group"));
    remote_store_free(s);
    chmod(cred_path, 0600);
    s = load_ok("s3://bkt/k", NULL);
    assert_null(s->warning);
    remote_store_free(s);
    /* a readable file without the keys used is no concern */
    setenv("AWS_ACCESS_KEY_ID", "E", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "SECRETVALUE", 1);
    chmod(cred_path, 0644);
    s = load_ok("s3://bkt/k", NULL);
    assert_null(s->warning);
    remote_store_free(s);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    unlink(cred_path);
}

/* Hostile files: every one a one-line error or a load, never a crash. */
static void test_hostile_files(void **state)
{
    (void)state;
    static const struct { const char *text, *words; } bad[] = {
        { "[default\naws_access_key_id = A\n", "without ']'" },
        { "[default]\njust words\n", "not 'key = value'" },
        { "[default]\naws_access_key_id = A\naws_secret_access_key = two words\n", "blanks" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(cred_path, bad[i].text, 0600);
        load_refused("s3://bkt/k", NULL, bad[i].words);
    }
    /* a NUL byte */
    FILE *f = fopen(cred_path, "w");
    fwrite("[default]\na\0b = c\n", 1, 18, f);
    fclose(f);
    load_refused("s3://bkt/k", NULL, "NUL");
    /* a line too long, a file too large */
    size_t n = REMOTE_STORE_LINE_MAX + 100;
    char *big = malloc(REMOTE_STORE_FILE_MAX + 2);
    assert_non_null(big);
    memset(big, 'x', n);
    memcpy(big, "[default]\nk = ", 14);
    big[n] = '\0';
    write_file(cred_path, big, 0600);
    load_refused("s3://bkt/k", NULL, "longer than");
    memset(big, '#', REMOTE_STORE_FILE_MAX + 1);
    for (size_t i = 100; i < REMOTE_STORE_FILE_MAX; i += 100)
        big[i] = '\n';
    big[REMOTE_STORE_FILE_MAX + 1] = '\0';
    write_file(cred_path, big, 0600);
    load_refused("s3://bkt/k", NULL, "larger than");
    /* a folder in its place */
    unlink(cred_path);
    mkdir(cred_path, 0700);
    load_refused("s3://bkt/k", NULL, "not a regular file");
    rmdir(cred_path);
    /* random bytes: refused or loaded, one line, never a crash */
    unsigned seed = 12345;
    for (int t = 0; t < 300; t++) {
        size_t len = 1 + (seed = seed * 1103515245u + 12345u) % 400;
        static const char alphabet[] = "[]=:# \t\n\r;abcdefgprofile_aws_access_key_id";
        for (size_t i = 0; i < len; i++) {
            seed = seed * 1103515245u + 12345u;
            big[i] = alphabet[(seed >> 16) % (sizeof alphabet - 1)];
        }
        big[len] = '\0';
        write_file(cred_path, big, 0600);
        write_file(conf_path, big, 0600);
        struct remote_store *s = NULL;
        struct gguf_diag d;
        if (remote_store_load("s3://bkt/k", NULL, &s, &d) == GGUF_OK)
            remote_store_free(s);
        else
            assert_null(strchr(d.msg, '\n'));
    }
    free(big);
    unlink(cred_path);
    unlink(conf_path);
}

static void test_error_documents(void **state)
{
    (void)state;
    struct remote_s3_error e;
    const char *doc = "<?xml version='1.0' encoding='UTF-8'?>\n<Error><Code>AccessDenied</Code>"
                      "<Message>Access &lt;Denied&gt; &amp; more\nlines</Message>"
                      "<RequestId>tx1</RequestId></Error>";
    assert_true(remote_s3_error_parse(doc, strlen(doc), &e));
    assert_string_equal(e.code, "AccessDenied");
    assert_string_equal(e.message, "Access <Denied> & more lines");
    assert_string_equal(e.region, "");
    doc = "<Error><Code>AuthorizationHeaderMalformed</Code><Message>the region 'us-east-1' is "
          "wrong; expecting 'eu-west-1'</Message><Region>eu-west-1</Region></Error>";
    assert_true(remote_s3_error_parse(doc, strlen(doc), &e));
    assert_string_equal(e.region, "eu-west-1");
    doc = "<Error><Code>PermanentRedirect</Code><Region>EU WEST</Region><Endpoint>b.s3.amazonaws"
          ".com</Endpoint></Error>";
    assert_true(remote_s3_error_parse(doc, strlen(doc), &e));
    assert_string_equal(e.region, "");
    assert_string_equal(e.endpoint, "b.s3.amazonaws.com");
    /* not documents */
    static const char *const nots[] = { "", "<html>404</html>", "<Error><Code></Code></Error>",
                                        "<Error><Code>Unclosed", "<Error>" };
    for (size_t i = 0; i < sizeof nots / sizeof nots[0]; i++)
        assert_false(remote_s3_error_parse(nots[i], strlen(nots[i]), &e));
    /* long and binary fields are cut and cleaned; the length is honoured */
    char buf[2000];
    int n = snprintf(buf, sizeof buf, "<Error><Code>%0300d</Code><Message>\x01\xff</Message>", 7);
    memcpy(buf + n, "</Error>", 8);
    assert_true(remote_s3_error_parse(buf, (size_t)n + 8, &e));
    assert_int_equal(strlen(e.code), sizeof e.code - 1);
    assert_string_equal(e.message, "??");
    assert_false(remote_s3_error_parse(doc, 20, &e));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_urls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_credentials, setup, teardown),
        cmocka_unit_test_setup_teardown(test_profiles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mode_warning, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostile_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_documents, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
